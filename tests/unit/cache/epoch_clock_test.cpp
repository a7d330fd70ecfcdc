// SPDX-License-Identifier: Apache-2.0
// EpochClock (cache/epoch_clock.h): the time it gives for the oldest dirty
// epoch is never later than the first time a write of that epoch read
// before its insert, and falls back to older stamps (earlier times) when
// the epoch has none of its own.
#include <catch2/catch.hpp>

#include <random>
#include <thread>
#include <vector>

#include "cache/epoch_clock.h"

namespace ubcache {

TEST_CASE("epoch clock: the floor covers the epochs a start found, stamps the rest") {
  EpochClock c;
  c.Start(/*newest=*/4, /*floor_ms=*/1000);
  CHECK(c.Stamped(4));
  CHECK_FALSE(c.Stamped(5));
  CHECK(c.AsOf(3) == 1000);
  c.Stamp(5, 5, 2000);
  CHECK(c.Stamped(5));
  CHECK(c.AsOf(4) == 1000);
  CHECK(c.AsOf(5) == 2000);
  CHECK(c.AsOf(9) == 2000);  // no stamp of its own: the newest older one
  c.Stamp(5, 5, 1500);       // a racing write that read the clock earlier
  CHECK(c.AsOf(5) == 1500);  // the least time offered
  c.Stamp(5, 5, 1800);
  CHECK(c.AsOf(5) == 1500);
}

TEST_CASE("epoch clock: a write that may have taken either of two epochs stamps both") {
  EpochClock c;
  c.Start(0, 0);
  c.Stamp(1, 1, 100);
  c.Stamp(2, 3, 250);  // an epoch closed while it inserted
  CHECK(c.AsOf(2) == 250);
  CHECK(c.AsOf(3) == 250);
  c.Stamp(3, 3, 300);  // later: keeps 250
  CHECK(c.AsOf(3) == 250);
}

TEST_CASE("epoch clock: Forget keeps the stamp the oldest epoch falls back on") {
  EpochClock c;
  c.Start(0, 0);
  for (uint64_t e = 1; e <= 10; e++) c.Stamp(e, e, e * 100);
  c.Forget(5);
  CHECK(c.AsOf(5) == 500);
  CHECK(c.stamps() == 6);  // 5..10
  c.Forget(12);            // nothing dirty: every epoch before the current one
  CHECK(c.AsOf(12) == 1000);
  CHECK(c.stamps() == 1);
}

TEST_CASE("epoch clock: past kMaxStamps older stamps thin out, and AsOf only gets earlier") {
  EpochClock c;
  c.Start(0, 0);
  const uint64_t n = EpochClock::kMaxStamps + 1000;
  for (uint64_t e = 1; e <= n; e++) c.Stamp(e, e, e * 10);
  CHECK(c.stamps() <= EpochClock::kMaxStamps);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 1000; i++) {
    uint64_t e = 1 + rng() % n;
    uint64_t t = c.AsOf(e);
    INFO("epoch " << e);
    CHECK(t <= e * 10);          // never later than its own stamp
    CHECK(t + 40 * 10 >= e * 10);  // and not much earlier (every other older stamp kept)
  }
  CHECK(c.AsOf(n) == n * 10);  // the newest are untouched
}

TEST_CASE("epoch clock: writes racing on many threads leave each epoch's least time") {
  EpochClock c;
  c.Start(0, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++)
    threads.emplace_back([&c, t] {
      for (uint64_t e = 1; e <= 2000; e++)
        if (!c.Stamped(e) || e % 7 == 0) c.Stamp(e, e, e * 100 + static_cast<uint64_t>(t));
    });
  for (auto& th : threads) th.join();
  for (uint64_t e = 1; e <= 2000; e++) {
    INFO("epoch " << e);
    CHECK(c.AsOf(e) >= e * 100);
    CHECK(c.AsOf(e) <= e * 100 + 3);
  }
}

}  // namespace ubcache
