// SPDX-License-Identifier: Apache-2.0
// The auto policies' rules (cache/admission.h) on synthetic latency streams
// and bucket counts: deterministic, no devices.
#include "cache/admission.h"

#include <catch2/catch.hpp>

using namespace ubcache;
using Op = ServiceTime::Op;

namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kT0 = 1'000 * kMs;  // an arbitrary clock reading

// `n` samples of `latency_ns` for 4 KiB requests, the last one at `now`.
void Feed(ServiceTime& t, Op op, uint64_t latency_ns, int n, uint64_t now) {
  for (int i = 0; i < n; i++) t.Observe(op, 4096, latency_ns, now);
}

}  // namespace

TEST_CASE("auto congestion: a deep NVMe queue is still faster than a spindle, and does not bypass") {
  ServiceTime cache, spindle;
  Feed(spindle, Op::kRead, 6 * kMs, 64, kT0);       // a 6 ms random read
  Feed(cache, Op::kRead, 2'500'000, 64, kT0);       // 2.5 ms: past bcache's 2000 us
  CHECK_FALSE(AutoCongested(cache, spindle, Op::kRead, 4096, kT0));
}

TEST_CASE("auto congestion: an SSD stuck at 20 ms in front of a fast network store bypasses") {
  ServiceTime cache, store;
  Feed(store, Op::kRead, 1 * kMs, 64, kT0);
  Feed(cache, Op::kRead, 20 * kMs, 64, kT0);
  CHECK(AutoCongested(cache, store, Op::kRead, 4096, kT0));
  // Reads and writes are judged apart: the writes have no evidence.
  CHECK_FALSE(AutoCongested(cache, store, Op::kWrite, 4096, kT0));
}

TEST_CASE("auto congestion: follows the cache device as it slows down and recovers") {
  ServiceTime cache, spindle;
  Feed(spindle, Op::kWrite, 5 * kMs, 64, kT0);
  Feed(cache, Op::kWrite, 100'000, 64, kT0);
  CHECK_FALSE(AutoCongested(cache, spindle, Op::kWrite, 4096, kT0));
  // A stall: within a few dozen slow completions the cache is slower.
  Feed(cache, Op::kWrite, 30 * kMs, 48, kT0 + kMs);
  CHECK(AutoCongested(cache, spindle, Op::kWrite, 4096, kT0 + kMs));
  // It clears: as many fast completions bring it back.
  Feed(cache, Op::kWrite, 100'000, 64, kT0 + 2 * kMs);
  CHECK_FALSE(AutoCongested(cache, spindle, Op::kWrite, 4096, kT0 + 2 * kMs));
}

TEST_CASE("auto congestion: no evidence, no bypass, and a stale picture lets a probe through") {
  ServiceTime cache, backing;
  CHECK_FALSE(AutoCongested(cache, backing, Op::kRead, 4096, kT0));  // neither measured
  Feed(cache, Op::kRead, 20 * kMs, 8, kT0);
  CHECK_FALSE(AutoCongested(cache, backing, Op::kRead, 4096, kT0));  // backing not measured
  Feed(backing, Op::kRead, 1 * kMs, 7, kT0);
  CHECK_FALSE(AutoCongested(cache, backing, Op::kRead, 4096, kT0));  // one sample short of evidence
  Feed(backing, Op::kRead, 1 * kMs, 1, kT0);
  CHECK(AutoCongested(cache, backing, Op::kRead, 4096, kT0 + kProbeNs));
  // Nothing reached the cache for longer than kProbeNs: send the next request to it.
  CHECK_FALSE(AutoCongested(cache, backing, Op::kRead, 4096, kT0 + kProbeNs + 1));
}

TEST_CASE("auto congestion: compares within the request's size class") {
  ServiceTime cache, backing;
  // The cache is slower for 1 MiB requests only (a bandwidth-bound SSD
  // beside a store with more bandwidth), faster for 4 KiB ones.
  for (uint64_t i = 0; i < kMinSamples; i++) {
    cache.Observe(Op::kRead, 4096, 100'000, kT0);
    backing.Observe(Op::kRead, 4096, 2 * kMs, kT0);
    cache.Observe(Op::kRead, 1 << 20, 8 * kMs, kT0);
    backing.Observe(Op::kRead, 1 << 20, 4 * kMs, kT0);
  }
  CHECK_FALSE(AutoCongested(cache, backing, Op::kRead, 4096, kT0));
  CHECK(AutoCongested(cache, backing, Op::kRead, 1 << 20, kT0));
}

TEST_CASE("spare space: free buckets beyond the reserve, against 10 % of the cache") {
  CHECK(SpareSpace(1000, 10, 1000));
  CHECK(SpareSpace(111, 10, 1000));   // 101 spare > 10 %
  CHECK_FALSE(SpareSpace(110, 10, 1000));  // exactly 10 %: no
  CHECK_FALSE(SpareSpace(10, 10, 1000));
  CHECK_FALSE(SpareSpace(5, 10, 1000));
  CHECK_FALSE(SpareSpace(0, 0, 0));
}

TEST_CASE("ghost list: a bypassed stream is one entry, found again by any overlap") {
  GhostList g;
  const uint64_t mib = 1 << 20;
  for (uint64_t off = 0; off < 64 * mib; off += mib) g.Add(0, 100 * mib + off, mib, kT0);
  CHECK(g.Contains(0, 100 * mib, 4096, kT0 + kMs));
  CHECK(g.Contains(0, 163 * mib + 4096, 4096, kT0 + kMs));
  CHECK(g.Contains(0, 99 * mib, 2 * mib, kT0 + kMs));  // overlaps the start
  CHECK_FALSE(g.Contains(0, 164 * mib, 4096, kT0 + kMs));
  CHECK_FALSE(g.Contains(0, 99 * mib, mib, kT0 + kMs));  // ends where it starts
  CHECK_FALSE(g.Contains(1, 100 * mib, 4096, kT0 + kMs));  // another device
  // Requests that arrive out of order (several connections) still merge:
  // 512 streams' worth of entries later, the first is there yet.
  g.Add(0, 300 * mib, mib, kT0);
  g.Add(0, 302 * mib, mib, kT0);
  g.Add(0, 301 * mib, mib, kT0);
  CHECK(g.Contains(0, 100 * mib, 4096, kT0 + kMs));
  CHECK(g.Contains(0, 302 * mib, 4096, kT0 + kMs));
}

TEST_CASE("ghost list: ranges expire, and the oldest goes first when it is full") {
  GhostList g;
  const uint64_t mib = 1 << 20;
  g.Add(0, 0, mib, kT0);
  CHECK(g.Contains(0, 0, 4096, kT0 + GhostList::kGhostNanos - 1));
  CHECK_FALSE(g.Contains(0, 0, 4096, kT0 + GhostList::kGhostNanos));
  // A clock read a little behind (another thread) still sees it.
  CHECK(g.Contains(0, 0, 4096, kT0 - 1000));

  GhostList full;
  for (unsigned i = 0; i <= GhostList::kGhostEntries; i++) full.Add(0, uint64_t{i} * 2 * mib, mib, kT0 + i);
  CHECK_FALSE(full.Contains(0, 0, 4096, kT0 + 1000));  // the first was replaced
  CHECK(full.Contains(0, 2 * mib, 4096, kT0 + 1000));
  CHECK(full.Contains(0, uint64_t{GhostList::kGhostEntries} * 2 * mib, 4096, kT0 + 1000));
}
