// SPDX-License-Identifier: Apache-2.0
// Congestion: bcache's latency-driven score (io.c bch_bbio_count_io_errors,
// request.c bch_get_congested). Slow cache completions make the cutoff
// non-zero and shrink it; fast completions and quiet time bring it back to
// 0; thresholds of 0 disable it.
#include "cache/congestion.h"

#include <catch2/catch.hpp>
#include <cstdint>

using namespace ubcache;

namespace {

constexpr uint32_t kRead = 2000;      // bcache's congested_read_threshold_us
constexpr uint32_t kWrite = 20000;    // bcache's congested_write_threshold_us
constexpr uint64_t kT0 = 50'000'000;  // µs; an arbitrary clock reading

// bcache's fract_exp_two (util.h): 2^(x / 2^fract_bits), linearly
// interpolated between powers of two.
uint64_t FractExpTwo(unsigned x, unsigned fract_bits) {
  unsigned fract = x & ~(~0u << fract_bits);
  x >>= fract_bits;
  x = 1u << x;
  x += (x * fract) >> fract_bits;
  return x;
}

}  // namespace

TEST_CASE("with no slow completions the cache is not congested") {
  Congestion c;
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0) == 0);
  for (int i = 0; i < 1000; i++) c.Observe(100, kRead, kT0 + i);
  REQUIRE(c.score() == 0);
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0 + 1000) == 0);
}

TEST_CASE("a completion exactly at the threshold is not slow") {
  Congestion c;
  c.Observe(kRead, kRead, kT0);
  REQUIRE(c.score() == 0);
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0) == 0);
  REQUIRE(c.slow_ios() == 0);
}

TEST_CASE("a slow completion above the threshold makes the cutoff non-zero") {
  Congestion c;
  c.Observe(10 * 1024, kRead, kT0);  // 10 ms on a 2 ms threshold
  REQUIRE(c.score() == -10);
  REQUIRE(c.slow_ios() == 1);
  uint64_t cutoff = c.CongestedCutoff(kRead, kWrite, kT0);
  REQUIRE(cutoff > 0);
  REQUIRE(cutoff % 512 == 0);  // whole sectors, as bcache's
}

TEST_CASE("the cutoff shrinks as more slow completions arrive") {
  Congestion c;
  uint64_t prev = UINT64_MAX;
  uint64_t first = 0;
  for (int i = 0; i < 60; i++) {
    c.Observe(20 * 1024, kRead, kT0);
    uint64_t cutoff = c.CongestedCutoff(kRead, kWrite, kT0);
    REQUIRE(cutoff > 0);
    REQUIRE(cutoff <= prev);
    if (i == 0) first = cutoff;
    prev = cutoff;
  }
  REQUIRE(prev < first / 1000);
  // Fully congested: one sector, so nearly everything bypasses.
  REQUIRE(c.score() == -Congestion::kMax);
  REQUIRE(prev == 512);
}

TEST_CASE("the score never drops below -CONGESTED_MAX") {
  Congestion c;
  c.Observe(100'000'000, kWrite, kT0);  // 100 s
  REQUIRE(c.score() == -Congestion::kMax);
  c.Observe(100'000'000, kWrite, kT0);
  REQUIRE(c.score() == -Congestion::kMax);
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0) == 512);
}

TEST_CASE("the congested cutoff follows bcache's fract_exp_two curve in bytes") {
  for (int64_t ms = 1; ms <= Congestion::kMax; ms++) {
    Congestion c;
    c.Observe(static_cast<uint64_t>(ms) * 1024, 1, kT0);
    REQUIRE(c.score() == -ms);
    unsigned i = static_cast<unsigned>(Congestion::kMax - ms);
    uint64_t want_sectors = i > 0 ? FractExpTwo(i, 6) : 1;
    INFO("score " << -ms);
    REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0) == want_sectors * 512);
  }
}

TEST_CASE("barely congested, the cutoff is about 32 MiB, fully congested, one sector") {
  Congestion barely;
  barely.Observe(1024, 1, kT0);
  REQUIRE(barely.CongestedCutoff(kRead, kWrite, kT0) == 65024ull * 512);
  Congestion fully;
  fully.Observe(1024 * 1024, 1, kT0);
  REQUIRE(fully.CongestedCutoff(kRead, kWrite, kT0) == 512);
}

TEST_CASE("fast completions bring the cutoff back to 0, one step each") {
  Congestion c;
  c.Observe(30 * 1024, kRead, kT0);
  REQUIRE(c.score() == -30);
  uint64_t prev = c.CongestedCutoff(kRead, kWrite, kT0);
  for (int i = 0; i < 29; i++) {
    c.Observe(100, kRead, kT0);
    uint64_t cutoff = c.CongestedCutoff(kRead, kWrite, kT0);
    REQUIRE(cutoff >= prev);  // less congested: a longer run is needed to bypass
    REQUIRE(cutoff > 0);
    prev = cutoff;
  }
  c.Observe(100, kRead, kT0);
  REQUIRE(c.score() == 0);
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0) == 0);
  c.Observe(100, kRead, kT0);  // fast completions do not build credit
  REQUIRE(c.score() == 0);
}

TEST_CASE("time without slow completions forgives one point per ~ms") {
  Congestion c;
  c.Observe(20 * 1024, kRead, kT0);
  REQUIRE(c.score() == -20);
  uint64_t at_once = c.CongestedCutoff(kRead, kWrite, kT0);
  uint64_t later = c.CongestedCutoff(kRead, kWrite, kT0 + 10 * 1024);
  REQUIRE(later > at_once);
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0 + 20 * 1024 - 1) > 0);
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0 + 20 * 1024) == 0);
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0 + 3'600'000'000ull) == 0);
}

TEST_CASE("a new slow completion restarts the forgiveness clock") {
  Congestion c;
  c.Observe(20 * 1024, kRead, kT0);
  c.Observe(5 * 1024, kRead, kT0 + 100'000);  // 100 ms later, still slow
  REQUIRE(c.score() == -25);
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0 + 100'000) > 0);
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0 + 100'000 + 25 * 1024) == 0);
}

TEST_CASE("a clock reading before the last slow completion counts as no time passed") {
  Congestion c;
  c.Observe(20 * 1024, kRead, kT0);
  REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0 - 1) == c.CongestedCutoff(kRead, kWrite, kT0));
}

TEST_CASE("a threshold of 0 disables congestion") {
  SECTION("observations against a 0 threshold are ignored") {
    Congestion c;
    c.Observe(1'000'000, 0, kT0);
    REQUIRE(c.score() == 0);
    REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0) == 0);
  }
  SECTION("both thresholds 0: never congested, whatever the score") {
    Congestion c;
    c.Observe(100 * 1024, kRead, kT0);
    REQUIRE(c.CongestedCutoff(kRead, kWrite, kT0) > 0);
    REQUIRE(c.CongestedCutoff(0, 0, kT0) == 0);
  }
  SECTION("one threshold 0 leaves the other working") {
    Congestion c;
    c.Observe(100 * 1024, kWrite, kT0);
    REQUIRE(c.CongestedCutoff(0, kWrite, kT0) > 0);
    REQUIRE(c.CongestedCutoff(kRead, 0, kT0) > 0);
  }
}

TEST_CASE("the write threshold tolerates latencies the read threshold does not") {
  Congestion c;
  c.Observe(10'000, kWrite, kT0);  // a 10 ms write: under 20 ms
  REQUIRE(c.score() == 0);
  c.Observe(10'000, kRead, kT0);  // a 10 ms read: over 2 ms
  REQUIRE(c.score() < 0);
}
