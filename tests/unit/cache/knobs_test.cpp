// SPDX-License-Identifier: Apache-2.0
// CacheKnobs: bcache's names and defaults (admin-guide/bcache.rst), names
// that parse back to what they print, and errors that list the valid names.
#include "cache/knobs.h"

#include <catch2/catch.hpp>
#include <string>

using namespace ubcache;

TEST_CASE("knob defaults are bcache's, but for the adaptive ones, which --policy bcache restores") {
  CacheKnobs k;
  REQUIRE(k.cache_mode.load() == CacheMode::kWritethrough);
  REQUIRE(k.sequential_cutoff.load() == kAutoCutoff);
  REQUIRE(k.congested_read_threshold_us.load() == kAutoThresholdUs);
  REQUIRE(k.congested_write_threshold_us.load() == kAutoThresholdUs);
  REQUIRE(FixedThresholdUs(k.congested_read_threshold_us.load()) == 0);  // no bcache score under auto
  k.UseBcachePolicy();
  REQUIRE(k.sequential_cutoff.load() == 4u * 1024 * 1024);
  REQUIRE(k.congested_read_threshold_us.load() == 2000);
  REQUIRE(k.congested_write_threshold_us.load() == 20000);
  REQUIRE(FixedThresholdUs(k.congested_read_threshold_us.load()) == 2000);
  REQUIRE(k.replacement.load() == ReplacementPolicy::kLru);
  REQUIRE(k.writeback_percent.load() == 10);
  REQUIRE(k.writeback_delay.load() == 30);
  REQUIRE(k.writeback_running.load());
  REQUIRE(k.cutoff_writeback.load() == 40);
  REQUIRE(k.cutoff_writeback_sync.load() == 70);
}

TEST_CASE("a knob set from one thread is seen by the next request") {
  CacheKnobs k;
  k.cache_mode = CacheMode::kWriteback;
  k.sequential_cutoff = 0;
  REQUIRE(k.cache_mode.load() == CacheMode::kWriteback);
  REQUIRE(k.sequential_cutoff.load() == 0);
}

TEST_CASE("cache modes print bcache's names and parse back") {
  const std::pair<CacheMode, const char*> modes[] = {{CacheMode::kWritethrough, "writethrough"},
                                                     {CacheMode::kWriteback, "writeback"},
                                                     {CacheMode::kWritearound, "writearound"},
                                                     {CacheMode::kNone, "none"}};
  for (auto [mode, name] : modes) {
    INFO(name);
    REQUIRE(std::string(CacheModeName(mode)) == name);
    auto parsed = ParseCacheMode(CacheModeName(mode));
    REQUIRE(parsed.ok());
    REQUIRE(*parsed == mode);
  }
}

TEST_CASE("replacement policies print bcache's names and parse back") {
  const std::pair<ReplacementPolicy, const char*> policies[] = {
      {ReplacementPolicy::kLru, "lru"},
      {ReplacementPolicy::kFifo, "fifo"},
      {ReplacementPolicy::kRandom, "random"}};
  for (auto [policy, name] : policies) {
    INFO(name);
    REQUIRE(std::string(ReplacementPolicyName(policy)) == name);
    auto parsed = ParseReplacementPolicy(ReplacementPolicyName(policy));
    REQUIRE(parsed.ok());
    REQUIRE(*parsed == policy);
  }
}

TEST_CASE("an unknown cache mode is rejected with the valid names in the message") {
  for (const char* bad : {"", "write-back", "WRITEBACK", "writeback ", "lru", "writethroughx"}) {
    INFO("'" << bad << "'");
    auto r = ParseCacheMode(bad);
    REQUIRE_FALSE(r.ok());
    REQUIRE(r.status().IsInvalidArgument());
    const std::string& m = r.status().message();
    REQUIRE(m.find("cache_mode") != std::string::npos);
    REQUIRE(m.find("'" + std::string(bad) + "'") != std::string::npos);
    for (const char* valid : {"writethrough", "writeback", "writearound", "none"})
      REQUIRE(m.find(valid) != std::string::npos);
  }
}

TEST_CASE("an unknown replacement policy is rejected with the valid names in the message") {
  for (const char* bad : {"", "LRU", "clock", "writeback", "fifo2"}) {
    INFO("'" << bad << "'");
    auto r = ParseReplacementPolicy(bad);
    REQUIRE_FALSE(r.ok());
    REQUIRE(r.status().IsInvalidArgument());
    const std::string& m = r.status().message();
    REQUIRE(m.find("cache_replacement_policy") != std::string::npos);
    REQUIRE(m.find("'" + std::string(bad) + "'") != std::string::npos);
    for (const char* valid : {"lru", "fifo", "random"}) REQUIRE(m.find(valid) != std::string::npos);
  }
}

TEST_CASE("enum values are stable, as they are stored in superblocks") {
  // bcache's CACHE_MODE_* and CACHE_REPLACEMENT_* numbering.
  REQUIRE(static_cast<int>(CacheMode::kWritethrough) == 0);
  REQUIRE(static_cast<int>(CacheMode::kWriteback) == 1);
  REQUIRE(static_cast<int>(CacheMode::kWritearound) == 2);
  REQUIRE(static_cast<int>(CacheMode::kNone) == 3);
  REQUIRE(static_cast<int>(ReplacementPolicy::kLru) == 0);
  REQUIRE(static_cast<int>(ReplacementPolicy::kFifo) == 1);
  REQUIRE(static_cast<int>(ReplacementPolicy::kRandom) == 2);
}
