// SPDX-License-Identifier: Apache-2.0
// Controller: the commands behind `ubcache ctl`, without a socket.
#include "control/controller.h"

#include <catch2/catch.hpp>
#include <ctime>
#include <regex>
#include <set>
#include <sstream>

#include "backend/sync_io.h"
#include "tests/unit/control/control_rig.h"
#include "util/aligned_buffer.h"
#include "util/clock.h"

using namespace ubcache;
using namespace ubcache::control;

namespace {

Result<std::string> Run(Controller& c, const std::string& line, std::vector<std::string>* progress = nullptr) {
  auto r = ParseRequest(line);
  if (!r.ok()) return r.status();
  return c.Execute(*r, [&](const std::string& p) {
    if (progress) progress->push_back(p);
  });
}

std::string Out(Controller& c, const std::string& line) {
  auto r = Run(c, line);
  INFO(line << ": " << r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

void ReadTwice(ControlRig& rig, uint64_t off) {
  AlignedBuffer b(64 << 10);
  for (int i = 0; i < 2; i++) {
    REQUIRE(SyncRead(*rig.dev, off, b.size(), b.data()).ok());
    for (int k = 0; k < 20; k++) rig.reactor->RunOnce(false);  // fills land
  }
}

}  // namespace

TEST_CASE("show lists every attribute once, grouped, as name value lines") {
  ControlRig rig;
  Controller c({rig.target});
  auto out = Run(c, "ubcache-ctl/1 show");
  REQUIRE(out.ok());
  std::istringstream in(*out);
  std::string line;
  std::set<std::string> names;
  int headers = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      headers++;
      continue;
    }
    auto sp = line.find(' ');
    REQUIRE(sp != std::string::npos);
    names.insert(line.substr(0, sp));
  }
  CHECK(headers == 8);
  CHECK(names.size() == Attributes().size());
  CHECK(out->find("sequential_cutoff auto\n") != std::string::npos);
}

TEST_CASE("get, set and stats answer in text and JSON") {
  ControlRig rig;
  Controller c({rig.target});
  CHECK(Out(c, "ubcache-ctl/1 set sequential_cutoff 0") == "sequential_cutoff 0\n");
  CHECK(Out(c, "ubcache-ctl/1 get sequential_cutoff") == "0\n");
  CHECK(Out(c, "ubcache-ctl/1 format=json get cache_mode") == "{\"cache_mode\":\"writethrough\"}\n");
  CHECK(Run(c, "ubcache-ctl/1 device=nosuch show").status().message() == "no device 'nosuch' (exports: disk)");
  ReadTwice(rig, 1 << 20);
  auto stats = Run(c, "ubcache-ctl/1 stats stats_total");
  REQUIRE(stats.ok());
  CHECK(stats->find("stats_total/cache_hits 1\n") != std::string::npos);
  CHECK(stats->find("stats_total/cache_misses 1\n") != std::string::npos);
  auto all = Run(c, "ubcache-ctl/1 format=json stats");
  REQUIRE(all.ok());
  CHECK(all->find("\"stats_day/cache_hits\":") != std::string::npos);
  CHECK(all->front() == '{');
  REQUIRE(Run(c, "ubcache-ctl/1 clear-stats").ok());
  CHECK(Out(c, "ubcache-ctl/1 get stats_total/cache_hits") == "0\n");
  CHECK(Run(c, "ubcache-ctl/1 stats nosuch").status().IsInvalidArgument());
}

TEST_CASE("priority-stats reports bcache's fields and 31 quantiles") {
  ControlRig rig;
  Controller c({rig.target});
  REQUIRE(Run(c, "ubcache-ctl/1 set sequential_cutoff 0").ok());
  ReadTwice(rig, 0);
  auto out = Run(c, "ubcache-ctl/1 priority-stats");
  REQUIRE(out.ok());
  for (const char* f : {"Unused:", "Clean:", "Dirty:", "Metadata:", "Average:", "Sectors per Q:", "Quantiles:"})
    CHECK(out->find(f) != std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(*out, m, std::regex(R"(Quantiles:\t\[((\d+ ){30}\d+)\])")));
  CHECK(out->find("Dirty:\t\t0%") != std::string::npos);
}

TEST_CASE("metrics are valid Prometheus text with one TYPE per family") {
  ControlRig rig;
  Controller c({rig.target});
  auto out = Run(c, "ubcache-ctl/1 metrics");
  REQUIRE(out.ok());
  const std::regex help(R"(# HELP (ubcache_[a-z_]+) [^\n]*)");
  const std::regex type(R"(# TYPE (ubcache_[a-z_]+) (gauge|counter|histogram))");
  const std::regex sample(
      R"((ubcache_[a-z_]+)(\{[a-z_]+="[^"\\\n]*"(,[a-z_]+="[^"\\\n]*")*\})? (-?[0-9]+(\.[0-9]+)?(e[-+][0-9]+)?|NaN|[-+]Inf))");
  std::istringstream in(*out);
  std::string line, family, family_type;
  std::set<std::string> typed;
  int samples = 0;
  while (std::getline(in, line)) {
    INFO(line);
    std::smatch m;
    if (std::regex_match(line, m, help)) continue;
    if (std::regex_match(line, m, type)) {
      CHECK(typed.insert(m[1]).second);
      family = m[1];
      family_type = m[2];
      continue;
    }
    REQUIRE(std::regex_match(line, m, sample));
    if (family_type == "histogram")
      CHECK((m[1] == family + "_bucket" || m[1] == family + "_sum" || m[1] == family + "_count"));
    else
      CHECK(m[1] == family);
    samples++;
  }
  CHECK(samples > 50);
  CHECK(typed.count("ubcache_cache_hits_total"));
  CHECK(typed.count("ubcache_priority_stats_unused_percent"));
  CHECK(out->find("ubcache_cache_mode{device=\"disk\",mode=\"writethrough\"} 1\n") != std::string::npos);
}

TEST_CASE("after I/O the request counters, the latency histogram and ctl get agree") {
  ControlRig rig;
  Controller c({rig.target});
  ReadTwice(rig, 1 << 20);  // two 64 KiB reads
  AlignedBuffer b(4096);
  REQUIRE(SyncWrite(*rig.dev, 0, b.size(), b.data()).ok());
  CHECK(Out(c, "ubcache-ctl/1 get requests/read") == "2\n");
  CHECK(Out(c, "ubcache-ctl/1 get request_bytes/read") == "131072\n");
  CHECK(Out(c, "ubcache-ctl/1 get requests/write") == "1\n");
  CHECK(Out(c, "ubcache-ctl/1 get request_errors/write") == "0\n");
  CHECK(Out(c, "ubcache-ctl/1 get requests/flush") == "0\n");
  const std::string out = Out(c, "ubcache-ctl/1 metrics");
  for (const char* line : {"ubcache_requests_total{device=\"disk\",op=\"read\"} 2\n",
                           "ubcache_request_bytes_total{device=\"disk\",op=\"write\"} 4096\n",
                           "ubcache_request_errors_total{device=\"disk\",op=\"read\"} 0\n",
                           "ubcache_request_duration_seconds_count{device=\"disk\",op=\"read\"} 2\n",
                           "ubcache_request_duration_seconds_bucket{device=\"disk\",op=\"read\",le=\"+Inf\"} 2\n",
                           "ubcache_request_duration_seconds_count{device=\"disk\",op=\"cache\"} 0\n",
                           "# TYPE ubcache_request_duration_seconds histogram\n"}) {
    INFO(line);
    CHECK(out.find(line) != std::string::npos);
  }
  // The read buckets: every bound in order, counts cumulative.
  const std::regex bucket(
      R"re(ubcache_request_duration_seconds_bucket\{device="disk",op="read",le="([^"]+)"\} (\d+))re");
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), bucket); it != std::sregex_iterator(); ++it) {
    bounds.push_back(std::stod((*it)[1]));
    counts.push_back(std::stoull((*it)[2]));
  }
  REQUIRE(bounds.size() == RequestStats::kBuckets);
  for (size_t i = 1; i < bounds.size(); i++) {
    CHECK(bounds[i] > bounds[i - 1]);
    CHECK(counts[i] >= counts[i - 1]);
  }
  // The daemon's version and start, once, without a device label.
  std::smatch m;
  CHECK(std::regex_search(out, m, std::regex(R"(\nubcache_build_info\{version="\d+\.\d+\.\d+[^"]*"\} 1\n)")));
  REQUIRE(std::regex_search(out, m, std::regex(R"(\nubcache_start_time_seconds (\d+)\n)")));
  const auto now = static_cast<uint64_t>(std::time(nullptr));
  const uint64_t start = std::stoull(m[1]);
  CHECK(start <= now);
  CHECK(start + 3600 > now);  // this test process started within the hour
  CHECK(Out(c, "ubcache-ctl/1 get start_time") == std::to_string(start) + "\n");
}

TEST_CASE("detach serves from the backing device and marks the superblock detached, attach undoes it") {
  ControlRig rig;
  Controller c({rig.target});
  REQUIRE(Run(c, "ubcache-ctl/1 set sequential_cutoff 0").ok());
  ReadTwice(rig, 0);
  CHECK(Out(c, "ubcache-ctl/1 get stats_total/cache_hits") == "1\n");
  std::vector<std::string> progress;
  auto d = Run(c, "ubcache-ctl/1 detach", &progress);
  REQUIRE(d.ok());
  CHECK(!progress.empty());
  CHECK(Out(c, "ubcache-ctl/1 get state") == "no cache\n");
  CHECK(rig.Superblock().state == BackingState::kNone);
  CHECK(Run(c, "ubcache-ctl/1 detach").status().message() == "disk is already detached");
  ReadTwice(rig, 0);  // neither hits nor misses: the cache is not consulted
  CHECK(Out(c, "ubcache-ctl/1 get stats_total/cache_hits") == "1\n");
  CHECK(Out(c, "ubcache-ctl/1 get internal/btree_extents") == "0\n");
  auto wrong = Run(c, "ubcache-ctl/1 attach mem:other");
  CHECK(wrong.status().message().find("is not this daemon's cache set") != std::string::npos);
  Out(c, "ubcache-ctl/1 attach " + rig.set_uuid);  // by set uuid, or by device: mem:cache
  CHECK(rig.Superblock().state == BackingState::kClean);
  CHECK(FormatUuid(rig.Superblock().set_uuid) == rig.set_uuid);
  CHECK(Out(c, "ubcache-ctl/1 get state") == "clean\n");
  ReadTwice(rig, 0);
  CHECK(Out(c, "ubcache-ctl/1 get stats_total/cache_hits") == "2\n");
}

TEST_CASE("writes while detached never leave stale data in the cache after attach") {
  ControlRig rig;
  Controller c({rig.target});
  REQUIRE(Run(c, "ubcache-ctl/1 set sequential_cutoff 0").ok());
  ReadTwice(rig, 0);  // cached
  REQUIRE(Run(c, "ubcache-ctl/1 detach").ok());
  AlignedBuffer w(64 << 10);
  std::memset(w.data(), 0x5a, w.size());
  REQUIRE(SyncWrite(*rig.dev, 0, w.size(), w.data()).ok());
  Out(c, "ubcache-ctl/1 attach mem:cache");
  AlignedBuffer r(64 << 10);
  REQUIRE(SyncRead(*rig.dev, 0, r.size(), r.data()).ok());
  CHECK(std::memcmp(r.data(), w.data(), r.size()) == 0);
}

TEST_CASE("flush with nothing dirty returns at once after one progress line") {
  ControlRig rig;
  Controller c({rig.target});
  std::vector<std::string> progress;
  auto out = Run(c, "ubcache-ctl/1 flush", &progress);
  REQUIRE(out.ok());
  REQUIRE(progress.size() == 1);
  CHECK(progress[0] == "flush disk: 0 B dirty left, 0 B/s");
  CHECK(out->find("clean") != std::string::npos);
  CHECK(Out(c, "ubcache-ctl/1 dirty-data") == "0\n");
  auto dbg = Run(c, "ubcache-ctl/1 writeback-rate-debug");
  REQUIRE(dbg.ok());
  for (const char* f : {"rate:", "dirty:", "target:", "proportional:", "integral:", "change:"})
    CHECK(dbg->find(f) != std::string::npos);
}

TEST_CASE("stop asks the daemon through its hook, with delete only when told") {
  ControlRig rig;
  Controller none({rig.target});
  auto refused = Run(none, "ubcache-ctl/1 stop");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("SIGTERM only") != std::string::npos);

  std::vector<bool> calls;
  Controller c({rig.target}, [&calls](bool del) {
    calls.push_back(del);
    return std::string("pid 1 stopping");
  });
  CHECK(Out(c, "ubcache-ctl/1 stop") == "pid 1 stopping\n");
  CHECK(Out(c, "ubcache-ctl/1 stop delete") == "pid 1 stopping\n");
  auto bad = Run(c, "ubcache-ctl/1 stop now");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "stop: 'now': the only argument is delete");
  CHECK(calls == std::vector<bool>{false, true});
}

TEST_CASE("resize runs the export's growth, runs long, and is refused where serve offers none") {
  ControlRig rig;
  auto resize = ParseRequest("ubcache-ctl/1 resize");
  REQUIRE(resize.ok());
  CHECK(Controller::RunsLong(*resize));
  CHECK_FALSE(ParseRequest("ubcache-ctl/1 resize 2G").ok());  // no arguments
  {
    Controller c({rig.target});
    auto r = Run(c, "ubcache-ctl/1 resize");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Status::Code::kNotSupported);
  }
  int calls = 0;
  Target t = rig.target;
  t.resize = [&]() -> Result<std::string> {
    calls++;
    if (calls == 1) return std::string("disk: grown from 32 MiB to 64 MiB (67108864 bytes)");
    return Status::InvalidArgument("disk: would shrink from 64 MiB to 16 MiB; shrinking is not supported");
  };
  Controller c({t});
  CHECK(Out(c, "ubcache-ctl/1 resize") == "disk: grown from 32 MiB to 64 MiB (67108864 bytes)\n");
  auto refused = Run(c, "ubcache-ctl/1 format=json resize");
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("shrinking is not supported"));
  CHECK(calls == 2);
}
