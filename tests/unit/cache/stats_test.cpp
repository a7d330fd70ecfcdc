// SPDX-License-Identifier: Apache-2.0
// CacheStats: bcache's request statistics. Counts land in "total" at once;
// five_minute / hour / day decay with their time constants over simulated
// time (clock passed in, no sleeping); hit_ratio and Clear as bcache's.
#include "cache/stats.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

using namespace ubcache;

namespace {

constexpr uint64_t kSecond = 1'000'000'000ull;
constexpr uint64_t kTick = CacheStats::kTickSeconds * kSecond;
constexpr uint64_t kT0 = 1'000'000 * kSecond;  // an arbitrary clock reading

constexpr StatsWindow kWindows[] = {StatsWindow::kTotal, StatsWindow::kFiveMinute,
                                    StatsWindow::kHour, StatsWindow::kDay};

void Hits(CacheStats& s, int n) {
  for (int i = 0; i < n; i++) s.CountHit(false);
}

}  // namespace

TEST_CASE("counts land in every group at once, each in its own field") {
  CacheStats s;
  s.Snapshot(StatsWindow::kTotal, kT0);
  Hits(s, 3);
  s.CountMiss(false);
  s.CountHit(true);
  s.CountMiss(true);
  s.CountMiss(true);
  s.CountMissCollision();
  s.CountReadahead();
  s.CountReadahead();
  s.CountBypassed(4096);
  s.CountBypassed(1 << 20);
  for (StatsWindow w : kWindows) {
    INFO(StatsWindowName(w));
    StatsGroup g = s.Snapshot(w, kT0);
    REQUIRE(g.cache_hits == 3);
    REQUIRE(g.cache_misses == 1);
    REQUIRE(g.cache_bypass_hits == 1);
    REQUIRE(g.cache_bypass_misses == 2);
    REQUIRE(g.cache_miss_collisions == 1);
    REQUIRE(g.cache_readaheads == 2);
    REQUIRE(g.bypassed == 4096 + (1 << 20));
  }
}

TEST_CASE("the first snapshot sees counts made before any clock reading") {
  CacheStats s;
  Hits(s, 5);
  REQUIRE(s.Snapshot(StatsWindow::kTotal, kT0).cache_hits == 5);
  REQUIRE(s.Snapshot(StatsWindow::kFiveMinute, kT0).cache_hits == 5);
}

TEST_CASE("after an hour of ticks five_minute is near 0 while total is unchanged") {
  CacheStats s;
  s.Snapshot(StatsWindow::kTotal, kT0);
  Hits(s, 1000);
  s.CountBypassed(1000 * 4096);
  s.Snapshot(StatsWindow::kTotal, kT0);
  for (uint64_t t = kT0; t <= kT0 + 3600 * kSecond; t += kTick)
    s.Snapshot(StatsWindow::kFiveMinute, t);
  const uint64_t hour = kT0 + 3600 * kSecond;
  StatsGroup five = s.Snapshot(StatsWindow::kFiveMinute, hour);
  REQUIRE(five.cache_hits < 1);
  REQUIRE(five.cache_hits == Approx(1000 * std::exp(-12.0)));
  REQUIRE(five.bypassed < 4096);
  REQUIRE(s.Snapshot(StatsWindow::kHour, hour).cache_hits == Approx(1000 * std::exp(-1.0)));
  REQUIRE(s.Snapshot(StatsWindow::kDay, hour).cache_hits == Approx(1000 * std::exp(-1.0 / 24)));
  StatsGroup total = s.Snapshot(StatsWindow::kTotal, hour);
  REQUIRE(total.cache_hits == 1000);
  REQUIRE(total.bypassed == 1000 * 4096);
}

TEST_CASE("one snapshot an hour later decays as much as an hour of 5 s ticks") {
  CacheStats ticked, jumped;
  for (CacheStats* s : {&ticked, &jumped}) {
    s->Snapshot(StatsWindow::kTotal, kT0);
    Hits(*s, 1000);
    s->Snapshot(StatsWindow::kTotal, kT0);
  }
  for (uint64_t t = kT0; t <= kT0 + 3600 * kSecond; t += kTick)
    ticked.Snapshot(StatsWindow::kHour, t);
  for (StatsWindow w : kWindows) {
    INFO(StatsWindowName(w));
    REQUIRE(jumped.Snapshot(w, kT0 + 3600 * kSecond).cache_hits ==
            Approx(ticked.Snapshot(w, kT0 + 3600 * kSecond).cache_hits));
  }
}

TEST_CASE("a steady rate settles five_minute at rate times five minutes") {
  // The decayed sums are exponential moving totals: a steady 10 hits/s
  // settles at about 10 * 300 in five_minute, and grows on in total.
  CacheStats s;
  s.Snapshot(StatsWindow::kTotal, kT0);
  uint64_t t = kT0;
  for (int tick = 1; tick <= 720; tick++) {  // an hour
    Hits(s, 50);
    t += kTick;
    s.Snapshot(StatsWindow::kTotal, t);
  }
  REQUIRE(s.Snapshot(StatsWindow::kTotal, t).cache_hits == 36000);
  double five = s.Snapshot(StatsWindow::kFiveMinute, t).cache_hits;
  REQUIRE(five > 0.9 * 3000);
  REQUIRE(five < 1.1 * 3000);
}

TEST_CASE("less than a tick does not decay, and the remainder carries over") {
  CacheStats s;
  s.Snapshot(StatsWindow::kTotal, kT0);
  Hits(s, 1000);
  REQUIRE(s.Snapshot(StatsWindow::kFiveMinute, kT0 + kTick - 1).cache_hits == 1000);
  // 0.2 s more makes one whole tick since kT0: one tick's decay, not none.
  REQUIRE(s.Snapshot(StatsWindow::kFiveMinute, kT0 + kTick + kSecond / 5).cache_hits ==
          Approx(1000 * std::exp(-5.0 / 300)));
  REQUIRE(s.Snapshot(StatsWindow::kFiveMinute, kT0 + 2 * kTick).cache_hits ==
          Approx(1000 * std::exp(-10.0 / 300)));
}

TEST_CASE("a snapshot with a clock reading older than the last tick does not wipe the groups") {
  // Readers take the clock before the lock, so one can arrive with a reading
  // older than the tick another reader just folded.
  CacheStats s;
  s.Snapshot(StatsWindow::kTotal, kT0);
  Hits(s, 1000);
  s.Snapshot(StatsWindow::kTotal, kT0);
  double after_two_ticks = s.Snapshot(StatsWindow::kFiveMinute, kT0 + 2 * kTick).cache_hits;
  REQUIRE(after_two_ticks == Approx(1000 * std::exp(-10.0 / 300)));
  REQUIRE(s.Snapshot(StatsWindow::kFiveMinute, kT0 + 2 * kTick - 1).cache_hits == after_two_ticks);
  REQUIRE(s.Snapshot(StatsWindow::kDay, kT0 + kTick).cache_hits > 999);
  // And time goes on from where it was.
  REQUIRE(s.Snapshot(StatsWindow::kFiveMinute, kT0 + 3 * kTick).cache_hits ==
          Approx(1000 * std::exp(-15.0 / 300)));
}

TEST_CASE("hit_ratio is hits as a percentage of hits plus misses, bypassed I/O excluded") {
  CacheStats s;
  REQUIRE(s.Snapshot(StatsWindow::kTotal, kT0).hit_ratio() == 0);
  Hits(s, 3);
  s.CountMiss(false);
  for (int i = 0; i < 100; i++) {
    s.CountHit(true);
    s.CountMiss(true);
  }
  REQUIRE(s.Snapshot(StatsWindow::kTotal, kT0).hit_ratio() == 75);
  s.CountMiss(false);
  s.CountMiss(false);
  REQUIRE(s.Snapshot(StatsWindow::kTotal, kT0).hit_ratio() == 50);
  StatsGroup g;
  g.cache_hits = 2;
  g.cache_misses = 1;
  REQUIRE(g.hit_ratio() == 66);  // truncated, as bcache's integer division
  g.cache_misses = 0;
  REQUIRE(g.hit_ratio() == 100);
}

TEST_CASE("Clear zeroes every group and the counts not yet folded") {
  CacheStats s;
  s.Snapshot(StatsWindow::kTotal, kT0);
  Hits(s, 10);
  s.CountBypassed(1 << 20);
  s.Snapshot(StatsWindow::kTotal, kT0);
  s.CountMiss(false);  // pending, not folded yet
  s.Clear();
  for (StatsWindow w : kWindows) {
    StatsGroup g = s.Snapshot(w, kT0 + kTick);
    REQUIRE(g.cache_hits == 0);
    REQUIRE(g.cache_misses == 0);
    REQUIRE(g.bypassed == 0);
  }
  s.CountHit(false);
  REQUIRE(s.Snapshot(StatsWindow::kTotal, kT0 + kTick).cache_hits == 1);
}

TEST_CASE("counts from many threads all land in total while readers fold") {
  CacheStats s;
  constexpr int kThreads = 4, kPer = 100000;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; i++)
    ts.emplace_back([&] {
      for (int j = 0; j < kPer; j++) {
        s.CountHit(false);
        s.CountBypassed(512);
      }
    });
  for (int i = 0; i < 1000; i++) s.Snapshot(StatsWindow::kDay, kT0);
  for (auto& t : ts) t.join();
  StatsGroup g = s.Snapshot(StatsWindow::kTotal, kT0);
  REQUIRE(g.cache_hits == kThreads * kPer);
  REQUIRE(g.bypassed == 512.0 * kThreads * kPer);
}

TEST_CASE("window names are bcache's stats directory names") {
  REQUIRE(std::string(StatsWindowName(StatsWindow::kTotal)) == "total");
  REQUIRE(std::string(StatsWindowName(StatsWindow::kFiveMinute)) == "five_minute");
  REQUIRE(std::string(StatsWindowName(StatsWindow::kHour)) == "hour");
  REQUIRE(std::string(StatsWindowName(StatsWindow::kDay)) == "day");
}
