// SPDX-License-Identifier: Apache-2.0
// The spindle model's numbers, computed, not timed: DESIGN.md §7 asks for a
// 10k rpm SAS disk with ~3.5 ms average seek at 180 MB/s, ~150-180 IOPS.
#include "backend/spindle_model.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

using namespace ubcache;

namespace {

constexpr uint64_t kDisk = 600ull << 30;  // seek distances scale to this size

// A fixed request stream, independent of the model's own RNG.
struct Lcg {
  uint64_t s;
  uint64_t Next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 17;
  }
  uint64_t Block(uint64_t size, uint64_t align) { return Next() % (size / align) * align; }
};

}  // namespace

TEST_CASE("transfer and revolution times follow the parameters") {
  SpindleModel m(SpindleParams{}, kDisk);
  CHECK(m.RevolutionNanos() == 6'000'000);        // 10k rpm
  CHECK(m.TransferNanos(180'000'000) == 1'000'000'000);  // 180 MB/s
  CHECK(m.TransferNanos(0) == 0);
  SpindleParams slow;
  slow.rpm = 7200;
  slow.mbps = 100;
  SpindleModel s(slow, kDisk);
  CHECK(s.RevolutionNanos() == 8'333'333);
  CHECK(s.TransferNanos(1'000'000) == 10'000'000);
}

TEST_CASE("a sequential follow-on pays transfer time only") {
  SpindleModel m(SpindleParams{}, kDisk);
  // The head starts at 0, so the first request there is already sequential.
  CHECK(m.Service(0, 65536) == m.TransferNanos(65536));
  CHECK(m.head() == 65536);
  for (int i = 1; i < 100; i++) {
    uint64_t len = 4096ull * (1 + i % 32);
    uint64_t off = m.head();
    INFO("request " << i);
    CHECK(m.Service(off, len) == m.TransferNanos(len));
    CHECK(m.head() == off + len);
  }
}

TEST_CASE("a request away from the head pays seek, rotation and transfer") {
  SpindleModel m(SpindleParams{}, kDisk);
  for (int i = 0; i < 200; i++) {
    uint64_t from = m.head();
    uint64_t to = (from + kDisk / 3 + 4096ull * i) % kDisk;
    uint64_t seek = m.SeekNanos(from, to);
    uint64_t t = m.Service(to, 4096);
    INFO("seek " << from << " -> " << to);
    CHECK(t >= seek + m.TransferNanos(4096));
    CHECK(t < seek + m.TransferNanos(4096) + m.RevolutionNanos());
  }
}

TEST_CASE("seek time is zero for no move, symmetric, and grows with the square root of distance") {
  SpindleModel m(SpindleParams{}, kDisk);
  CHECK(m.SeekNanos(12345, 12345) == 0);
  CHECK(m.SeekNanos(0, kDisk / 4) == m.SeekNanos(kDisk / 4, 0));
  // Any move pays at least the settle share of the average seek.
  const double settle = SpindleModel::kSettleShare * 3.5e6;
  CHECK(m.SeekNanos(0, 512) >= static_cast<uint64_t>(settle));
  CHECK(m.SeekNanos(0, 512) < static_cast<uint64_t>(settle) + 100'000);
  // Beyond settle, quadrupling the distance doubles the seek.
  for (uint64_t d : {kDisk / 1000, kDisk / 100, kDisk / 16}) {
    double s1 = static_cast<double>(m.SeekNanos(0, d)) - settle;
    double s4 = static_cast<double>(m.SeekNanos(0, 4 * d)) - settle;
    INFO("distance " << d);
    CHECK(s4 / s1 == Approx(2.0).epsilon(0.001));
  }
  // Monotonic in distance.
  uint64_t prev = 0;
  for (int i = 1; i <= 64; i++) {
    uint64_t s = m.SeekNanos(0, kDisk / 64 * i);
    CHECK(s > prev);
    prev = s;
  }
  // A full stroke: settle + (1 - settle share) * avg / E[sqrt d].
  CHECK(m.SeekNanos(0, kDisk) == Approx(3.5e6 * (0.2 + 0.8 * 15.0 / 8.0)).epsilon(0.001));
}

TEST_CASE("the average seek over random positions is avg_seek_ms") {
  SpindleModel m(SpindleParams{}, kDisk);
  Lcg rng{7};
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; i++) sum += m.SeekNanos(rng.Block(kDisk, 4096), rng.Block(kDisk, 4096));
  CHECK(sum / n == Approx(3.5e6).epsilon(0.02));
}

TEST_CASE("seek distances scale to the device size") {
  SpindleModel small(SpindleParams{}, 64ull << 20);
  SpindleModel big(SpindleParams{}, 64ull << 30);
  CHECK(small.SeekNanos(0, 32ull << 20) == big.SeekNanos(0, 32ull << 30));
}

TEST_CASE("the same seed gives the same service times, another seed different ones") {
  auto run = [](uint64_t seed) {
    SpindleParams p;
    p.seed = seed;
    SpindleModel m(p, kDisk);
    Lcg rng{99};
    std::vector<uint64_t> t;
    for (int i = 0; i < 500; i++) t.push_back(m.Service(rng.Block(kDisk, 4096), 4096));
    return t;
  };
  CHECK(run(1) == run(1));
  CHECK(run(2) == run(2));
  CHECK(run(1) != run(2));
}

TEST_CASE("default SAS params give 120-220 random 4 KiB IOPS") {
  SpindleModel m(SpindleParams{}, kDisk);
  Lcg rng{1234};
  const int n = 50000;
  double total_ns = 0;
  for (int i = 0; i < n; i++) total_ns += static_cast<double>(m.Service(rng.Block(kDisk, 4096), 4096));
  double iops = n / (total_ns / 1e9);
  INFO("random 4 KiB IOPS: " << iops);
  CHECK(iops >= 120);
  CHECK(iops <= 220);
  // seek 3.5 ms + half a revolution 3 ms + transfer ~0.02 ms
  CHECK(iops == Approx(1e3 / (3.5 + 3.0 + 4096 / 180e3)).epsilon(0.03));
}

TEST_CASE("default SAS params give 140-220 MB/s for 1 MiB sequential transfers") {
  SpindleModel m(SpindleParams{}, kDisk);
  uint64_t off = 10ull << 30;  // the first request seeks there
  const int n = 1000;
  double total_ns = 0;
  for (int i = 0; i < n; i++) {
    total_ns += static_cast<double>(m.Service(off, 1 << 20));
    off += 1 << 20;
  }
  double mbps = n * double(1 << 20) / 1e6 / (total_ns / 1e9);
  INFO("sequential MB/s: " << mbps);
  CHECK(mbps >= 140);
  CHECK(mbps <= 220);
}

TEST_CASE("tuned spindle params change the model as expected") {
  SpindleParams fast;
  fast.rpm = 15000;
  fast.avg_seek_ms = 2;
  SpindleModel a(SpindleParams{}, kDisk), b(fast, kDisk);
  CHECK(b.RevolutionNanos() < a.RevolutionNanos());
  CHECK(b.SeekNanos(0, kDisk / 2) < a.SeekNanos(0, kDisk / 2));
  CHECK(b.params().rpm == 15000);
}
