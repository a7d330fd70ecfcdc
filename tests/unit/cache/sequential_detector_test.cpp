// SPDX-License-Identifier: Apache-2.0
// SequentialDetector: bcache's stream detection. Contiguous I/O builds a
// run that crosses the cutoff, random I/O does not; streams expire after
// 5 s of silence; the last 128 streams are remembered, least recently used
// evicted first; devices never continue each other's streams.
#include "cache/sequential_detector.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>

using namespace ubcache;

namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kCutoff = 4 * kMiB;  // bcache's default sequential_cutoff
constexpr uint64_t kSecond = 1'000'000'000ull;
constexpr uint64_t kT0 = 1000 * kSecond;  // an arbitrary clock reading

}  // namespace

TEST_CASE("contiguous I/Os accumulate one run that crosses the 4 MiB cutoff") {
  SequentialDetector d;
  const uint64_t len = 64 * kKiB;
  const uint64_t ios_to_cutoff = kCutoff / len;  // 64
  for (uint64_t i = 0; i < ios_to_cutoff; i++) {
    uint64_t run = d.Observe(1, 10 * kMiB + i * len, len, kT0 + i * 1000);
    REQUIRE(run == (i + 1) * len);
    if (i + 1 < ios_to_cutoff) REQUIRE(run < kCutoff);
  }
  REQUIRE(d.Observe(1, 10 * kMiB + ios_to_cutoff * len, len, kT0 + kSecond) == kCutoff + len);
}

TEST_CASE("random I/Os each form a run of their own length and never reach the cutoff") {
  SequentialDetector d;
  std::mt19937_64 rng(7);
  // 4 KiB reads at 8 KiB-aligned offsets: no read can start where another ended.
  for (int i = 0; i < 20000; i++) {
    uint64_t offset = (rng() % (1u << 20)) * 8 * kKiB;
    REQUIRE(d.Observe(1, offset, 4 * kKiB, kT0 + static_cast<uint64_t>(i) * 1000) == 4 * kKiB);
  }
}

TEST_CASE("an I/O that skips ahead, re-reads or overlaps starts a new stream") {
  SequentialDetector d;
  REQUIRE(d.Observe(1, 0, 64 * kKiB, kT0) == 64 * kKiB);
  REQUIRE(d.Observe(1, 68 * kKiB, 64 * kKiB, kT0) == 64 * kKiB);  // 4 KiB gap
  REQUIRE(d.Observe(1, 68 * kKiB, 64 * kKiB, kT0) == 64 * kKiB);  // same range again
  REQUIRE(d.Observe(1, 100 * kKiB, 4 * kKiB, kT0) == 4 * kKiB);   // inside the last one
  // The stream that ended at 132 KiB is still there to continue.
  REQUIRE(d.Observe(1, 132 * kKiB, 4 * kKiB, kT0) == 68 * kKiB);
}

TEST_CASE("a stream whose I/Os arrive out of order, as over several connections, is one stream") {
  SequentialDetector d;
  const uint64_t len = 128 * kKiB;
  // Pieces 0..31 (4 MiB): pairs swapped, and pieces that arrive before the
  // ones ahead of them (6 7 before 4 5: 5 then joins two streams).
  const int order[] = {1, 0, 3, 2, 6, 7, 4, 5, 9, 8, 10, 11, 14, 12, 15, 13};
  uint64_t run = 0;
  for (int round = 0; round < 2; round++)
    for (int i : order) run = d.Observe(1, (round * 16 + i) * len, len, kT0 + i);
  REQUIRE(run == 32 * len);  // every piece counted in one run
  REQUIRE(run >= kCutoff);
  // The next piece continues it.
  REQUIRE(d.Observe(1, 32 * len, len, kT0 + 100) == 33 * len);
}

TEST_CASE("an I/O that ends where a stream starts joins it, a gap still does not") {
  SequentialDetector d;
  REQUIRE(d.Observe(1, 1 * kMiB, 64 * kKiB, kT0) == 64 * kKiB);
  REQUIRE(d.Observe(1, 1 * kMiB - 64 * kKiB, 64 * kKiB, kT0) == 128 * kKiB);
  REQUIRE(d.Observe(1, 1 * kMiB - 132 * kKiB, 64 * kKiB, kT0) == 64 * kKiB);  // 4 KiB short
}

TEST_CASE("a stream silent for 5 s expires and its next I/O starts a new run") {
  const uint64_t len = 1 * kMiB;
  SECTION("1 ns short of 5 s the stream continues") {
    SequentialDetector d;
    d.Observe(1, 0, len, kT0);
    REQUIRE(d.Observe(1, len, len, kT0 + SequentialDetector::kExpiryNanos - 1) == 2 * len);
  }
  SECTION("at 5 s it has expired, as bcache's time_before(jiffies, expiry)") {
    SequentialDetector d;
    d.Observe(1, 0, len, kT0);
    REQUIRE(d.Observe(1, len, len, kT0 + SequentialDetector::kExpiryNanos) == len);
  }
  SECTION("long after, too") {
    SequentialDetector d;
    d.Observe(1, 0, len, kT0);
    REQUIRE(d.Observe(1, len, len, kT0 + 3600 * kSecond) == len);
  }
}

TEST_CASE("each I/O of a stream restarts its 5 s expiry") {
  SequentialDetector d;
  const uint64_t len = 1 * kMiB;
  // One I/O every 4 s for a minute: never 5 s of silence, so one stream.
  for (uint64_t i = 0; i < 15; i++)
    REQUIRE(d.Observe(1, i * len, len, kT0 + i * 4 * kSecond) == (i + 1) * len);
}

TEST_CASE("the clock starting at zero still expires streams after 5 s") {
  SequentialDetector d;
  REQUIRE(d.Observe(1, 0, kMiB, 0) == kMiB);
  REQUIRE(d.Observe(1, kMiB, kMiB, 1) == 2 * kMiB);
  REQUIRE(d.Observe(1, 2 * kMiB, kMiB, 1 + SequentialDetector::kExpiryNanos) == kMiB);
}

TEST_CASE("128 interleaved streams are all tracked") {
  static_assert(SequentialDetector::kRecent == 128);
  SequentialDetector d;
  const uint64_t len = 128 * kKiB;
  const uint64_t rounds = 40;  // 5 MiB per stream, past the cutoff
  uint64_t t = kT0;
  for (uint64_t r = 0; r < rounds; r++)
    for (uint64_t s = 0; s < SequentialDetector::kRecent; s++) {
      uint64_t run = d.Observe(1, s * kMiB * 1024 + r * len, len, t += 1000);
      REQUIRE(run == (r + 1) * len);
    }
  REQUIRE(rounds * len >= kCutoff);
}

TEST_CASE("the 129th stream evicts the least recently used one") {
  const uint64_t len = 64 * kKiB;
  auto base = [](uint64_t s) { return s * kMiB * 1024; };
  uint64_t t = kT0;

  SECTION("streams touched in order: the first is evicted") {
    SequentialDetector d;
    for (uint64_t s = 0; s < 128; s++) d.Observe(1, base(s), len, t += 1000);
    REQUIRE(d.Observe(1, base(128), len, t += 1000) == len);  // stream 128 is new
    // Streams 1..127 continue (and become more recent than stream 128).
    for (uint64_t s = 1; s < 128; s++)
      REQUIRE(d.Observe(1, base(s) + len, len, t += 1000) == 2 * len);
    REQUIRE(d.Observe(1, base(128) + len, len, t += 1000) == 2 * len);
    // Stream 0 was evicted: its continuation starts over.
    REQUIRE(d.Observe(1, base(0) + len, len, t += 1000) == len);
  }
  SECTION("recency, not age, decides: a re-touched first stream survives") {
    SequentialDetector d;
    for (uint64_t s = 0; s < 128; s++) d.Observe(1, base(s), len, t += 1000);
    REQUIRE(d.Observe(1, base(0) + len, len, t += 1000) == 2 * len);  // stream 0 again
    d.Observe(1, base(128), len, t += 1000);                          // evicts stream 1
    REQUIRE(d.Observe(1, base(0) + 2 * len, len, t += 1000) == 3 * len);
    REQUIRE(d.Observe(1, base(1) + len, len, t += 1000) == len);
  }
}

TEST_CASE("different devices do not continue each other's streams") {
  SequentialDetector d;
  const uint64_t len = 64 * kKiB;
  REQUIRE(d.Observe(1, 0, len, kT0) == len);
  REQUIRE(d.Observe(2, len, len, kT0) == len);  // where device 1's stream ended
  REQUIRE(d.Observe(1, len, len, kT0) == 2 * len);
  REQUIRE(d.Observe(2, 2 * len, len, kT0) == 2 * len);
}

TEST_CASE("the same offsets on two devices are two streams") {
  SequentialDetector d;
  const uint64_t len = 256 * kKiB;
  for (uint64_t i = 0; i < 20; i++) {
    REQUIRE(d.Observe(0, i * len, len, kT0 + i) == (i + 1) * len);
    REQUIRE(d.Observe(7, i * len, len, kT0 + i) == (i + 1) * len);
  }
}

TEST_CASE("an I/O at device 0 offset 0 is not mistaken for an unused slot") {
  // Empty slots must not look like a stream that ended at some offset.
  SequentialDetector d;
  REQUIRE(d.Observe(0, 0, 4 * kKiB, 0) == 4 * kKiB);
  REQUIRE(d.Observe(0, 4 * kKiB, 4 * kKiB, 0) == 8 * kKiB);
}
