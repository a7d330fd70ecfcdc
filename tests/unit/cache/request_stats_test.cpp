// SPDX-License-Identifier: Apache-2.0
// RequestStats: per-operation request counters and latency histogram,
// sharded per reactor. Deterministic; no devices (CachedDevice's use of it
// is in cached_device_test.cpp).
#include "cache/request_stats.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using namespace ubcache;
using RS = RequestStats;

namespace {

uint64_t Sum(const std::array<uint64_t, RS::kBuckets>& b) {
  uint64_t n = 0;
  for (uint64_t x : b) n += x;
  return n;
}

}  // namespace

TEST_CASE("a latency lands in the first bucket whose bound it does not exceed, le inclusive") {
  CHECK(RS::BucketOf(0) == 0);
  CHECK(RS::BucketOf(25'000) == 0);  // le="2.5e-05" holds 25 µs itself
  CHECK(RS::BucketOf(25'001) == 1);
  CHECK(RS::BucketOf(1'000'000) == 5);  // 1 ms
  CHECK(RS::BucketOf(1'000'001) == 6);
  CHECK(RS::BucketOf(10'000'000'000) == RS::kBounds - 1);  // 10 s
  CHECK(RS::BucketOf(10'000'000'001) == RS::kBounds);     // +Inf
  CHECK(RS::BucketOf(UINT64_MAX) == RS::kBounds);
}

TEST_CASE("bucket labels are the bounds in seconds as Prometheus clients write them, then +Inf") {
  for (int b = 0; b < RS::kBounds; b++) {
    INFO("bucket " << b << ": " << RS::BucketLabel(b));
    if (b > 0) CHECK(RS::kBoundNs[b] > RS::kBoundNs[b - 1]);
    CHECK(std::strtod(RS::BucketLabel(b), nullptr) == static_cast<double>(RS::kBoundNs[b]) / 1e9);
  }
  CHECK(std::string(RS::BucketLabel(0)) == "2.5e-05");
  CHECK(std::string(RS::BucketLabel(2)) == "0.0001");  // Go's %g: 1e-04 would be valid, but unlike the rest
  CHECK(std::string(RS::BucketLabel(14)) == "1");
  CHECK(std::string(RS::BucketLabel(RS::kBounds)) == "+Inf");
}

TEST_CASE("op names are the metric's op labels, in IoOp's order and then cache") {
  const char* want[] = {"read", "write", "flush", "discard", "write_zeroes", "cache"};
  for (int op = 0; op < RS::kOps; op++) CHECK(std::string(RS::OpName(static_cast<RS::Op>(op))) == want[op]);
}

TEST_CASE("requests, errors, bytes and latencies are kept per operation") {
  RS s;
  s.Record(0, RS::kRead, 4096, 30'000, true);       // 30 µs: le 5e-05
  s.Record(0, RS::kRead, 65536, 3'000'000, true);   // 3 ms: le 0.005
  s.Record(1, RS::kRead, 4096, 20'000'000'000, false);  // 20 s, failed: +Inf, no bytes
  s.Record(0, RS::kWrite, 8192, 100'000, true);
  s.Record(0, RS::kFlush, 0, 2'000'000, true);
  s.Record(0, RS::kDiscard, 1 << 20, 50'000, false);  // bytes only for reads and writes
  RS::Totals t = s.Read();
  const RS::OpTotals& r = t[RS::kRead];
  CHECK(r.requests == 3);
  CHECK(r.errors == 1);
  CHECK(r.bytes == 4096 + 65536);
  CHECK(r.sum_ns == 30'000 + 3'000'000 + 20'000'000'000);
  CHECK(r.buckets[1] == 1);
  CHECK(r.buckets[RS::BucketOf(3'000'000)] == 1);
  CHECK(r.buckets[RS::kBounds] == 1);
  CHECK(Sum(r.buckets) == r.requests);
  CHECK(t[RS::kWrite].requests == 1);
  CHECK(t[RS::kWrite].bytes == 8192);
  CHECK(t[RS::kWrite].buckets[2] == 1);  // 100 µs: le 0.0001
  CHECK(t[RS::kFlush].requests == 1);
  CHECK(t[RS::kDiscard].requests == 1);
  CHECK(t[RS::kDiscard].errors == 1);
  CHECK(t[RS::kDiscard].bytes == 0);
  CHECK(t[RS::kWriteZeroes].requests == 0);
  CHECK(t[RS::kCache].requests == 0);
}

TEST_CASE("shards written by many threads sum to every request, and readers never see counts go back") {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  RS s;
  std::atomic<bool> done{false};
  std::atomic<int> regressions{0}, torn{0};
  std::thread reader([&] {
    uint64_t last = 0;
    while (!done.load()) {
      RS::Totals t = s.Read();
      if (t[RS::kRead].requests < last) regressions++;
      if (Sum(t[RS::kRead].buckets) != t[RS::kRead].requests) torn++;
      last = t[RS::kRead].requests;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kThreads; w++)
    writers.emplace_back([&s, w] {
      for (int i = 0; i < kPerThread; i++)
        s.Record(static_cast<unsigned>(w * 7), RS::kRead, 4096, static_cast<uint64_t>(i) * 1000, i % 100 != 0);
    });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  RS::Totals t = s.Read();
  CHECK(t[RS::kRead].requests == uint64_t{kThreads} * kPerThread);
  CHECK(t[RS::kRead].errors == uint64_t{kThreads} * kPerThread / 100);
  CHECK(t[RS::kRead].bytes == 4096ull * kThreads * (kPerThread - kPerThread / 100));
  CHECK(regressions == 0);
  CHECK(torn == 0);  // requests is the sum of the buckets read, by construction
}
