// SPDX-License-Identifier: Apache-2.0
// The attribute table: bcache's knobs with bcache's defaults, set/get, and
// refusals that change nothing.
#include "control/attributes.h"

#include <catch2/catch.hpp>
#include <map>

#include "control/controller.h"
#include "tests/unit/control/control_rig.h"

using namespace ubcache;
using namespace ubcache::control;

namespace {

std::string Get(ControlRig& rig, const std::string& name) {
  const Attribute* a = FindAttribute(name);
  REQUIRE(a);
  Reading r(rig.target);
  return a->get(r).ToString();
}

}  // namespace

TEST_CASE("every knob of DESIGN.md section 4 is settable and starts at bcache's default") {
  ControlRig rig;
  const std::map<std::string, std::string> kDefaults = {
      {"cache_mode", "writethrough"},
      {"sequential_cutoff", "auto"},
      {"congested_read_threshold_us", "auto"},
      {"congested_write_threshold_us", "auto"},
      {"writeback_percent", "10"},
      {"writeback_delay", "30"},
      {"writeback_running", "1"},
      {"writeback_rate", "524288"},
      {"writeback_rate_update_seconds", "5"},
      {"writeback_rate_p_term_inverse", "40"},
      {"writeback_rate_i_term_inverse", "10000"},
      {"writeback_rate_minimum", "4096"},
      {"cache_replacement_policy", "lru"},
      {"btree_cache_size", "67108864"},
      {"cutoff_writeback", "40"},
      {"cutoff_writeback_sync", "70"},
  };
  for (const auto& [name, def] : kDefaults) {
    INFO(name);
    const Attribute* a = FindAttribute(name);
    REQUIRE(a);
    CHECK(a->set);
    CHECK(!a->range.empty());
    CHECK(a->default_value == def);
    CHECK(Get(rig, name) == def);
  }
}

TEST_CASE("set then get round-trips every writable attribute, human sizes included") {
  ControlRig rig;
  for (const Attribute& a : Attributes()) {
    if (!a.set) continue;
    INFO(a.name);
    std::string v = a.choices.empty() ? a.default_value : a.choices.back();
    REQUIRE(SetAttribute(rig.target, a.name, v).ok());
    CHECK(Get(rig, a.name) == v);
  }
  REQUIRE(SetAttribute(rig.target, "sequential_cutoff", "8M").ok());
  CHECK(rig.set->knobs().sequential_cutoff.load() == 8u << 20);
  // "auto" comes back from a fixed value, and a fixed one from "auto".
  REQUIRE(SetAttribute(rig.target, "sequential_cutoff", "auto").ok());
  CHECK(Get(rig, "sequential_cutoff") == "auto");
  REQUIRE(SetAttribute(rig.target, "congested_read_threshold_us", "2000").ok());
  CHECK(rig.set->knobs().congested_read_threshold_us.load() == 2000);
  REQUIRE(SetAttribute(rig.target, "congested_read_threshold_us", "auto").ok());
  CHECK(rig.set->knobs().congested_read_threshold_us.load() == kAutoThresholdUs);
  CHECK(!SetAttribute(rig.target, "congested_read_threshold_us", "4294967295").ok());  // auto's own number
  REQUIRE(SetAttribute(rig.target, "btree_cache_size", "2M").ok());
  CHECK(Get(rig, "btree_cache_size") == "2097152");
}

TEST_CASE("a bad value is refused with the valid range and the old value is kept") {
  ControlRig rig;
  REQUIRE(SetAttribute(rig.target, "sequential_cutoff", "1M").ok());
  Status st = SetAttribute(rig.target, "sequential_cutoff", "lots");
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("valid: auto, or 0..4294967295") != std::string::npos);
  CHECK(Get(rig, "sequential_cutoff") == "1048576");
  CHECK(!SetAttribute(rig.target, "writeback_percent", "41").ok());
  CHECK(Get(rig, "writeback_percent") == "10");
  CHECK(!SetAttribute(rig.target, "writeback_running", "2").ok());
  st = SetAttribute(rig.target, "cache_mode", "writesometimes");
  CHECK(st.message().find("writethrough, writeback, writearound, none") != std::string::npos);
  CHECK(Get(rig, "cache_mode") == "writethrough");
  CHECK(SetAttribute(rig.target, "no_such_knob", "1").IsNotFound());
  CHECK(SetAttribute(rig.target, "stats_total/cache_hits", "1").IsInvalidArgument());  // read-only
}

TEST_CASE("cache_mode set through the control path persists in the backing superblock") {
  ControlRig rig;
  uint64_t seq = rig.Superblock().seq;
  REQUIRE(SetAttribute(rig.target, "cache_mode", "writearound").ok());
  CHECK(rig.set->knobs().cache_mode.load() == CacheMode::kWritearound);
  BackingSuperblock sb = rig.Superblock();
  CHECK(sb.cache_mode == CacheMode::kWritearound);
  CHECK(sb.seq == seq + 1);
}

TEST_CASE("writeback_order starts at flush, persists in the backing superblock, and refuses others") {
  ControlRig rig;
  CHECK(Get(rig, "writeback_order") == "flush");
  CHECK(rig.Superblock().writeback_order == WritebackOrder::kFlush);
  uint64_t seq = rig.Superblock().seq;
  REQUIRE(SetAttribute(rig.target, "writeback_order", "lba").ok());
  CHECK(rig.set->knobs().writeback_order.load() == WritebackOrder::kLba);
  BackingSuperblock sb = rig.Superblock();
  CHECK(sb.writeback_order == WritebackOrder::kLba);
  CHECK(sb.seq == seq + 1);
  CHECK(sb.cache_mode == CacheMode::kWritethrough);  // the other field kept
  CHECK(SetAttribute(rig.target, "writeback_order", "random").IsInvalidArgument());
  CHECK(Get(rig, "writeback_order") == "lba");
  REQUIRE(SetAttribute(rig.target, "writeback_order", "flush").ok());
  CHECK(rig.Superblock().writeback_order == WritebackOrder::kFlush);
}

TEST_CASE("attribute names are unique and every group has attributes") {
  std::map<std::string, int> seen;
  std::map<Group, int> groups;
  for (const Attribute& a : Attributes()) {
    CHECK(++seen[a.name] == 1);
    groups[a.group]++;
    CHECK(IsToken(a.name));
  }
  for (Group g : kAllGroups) CHECK(groups[g] > 0);
}
