// SPDX-License-Identifier: Apache-2.0
// RequestStats: what one export's clients asked of it and how long it took.
// Per operation (read, write, flush, discard, write_zeroes, cache: NBD's
// CACHE prefetch) it counts completed requests, failed ones and the bytes of
// successful reads and writes, and keeps a latency histogram with fixed
// Prometheus buckets (25 µs .. 10 s, then +Inf) and the latencies' sum.
// CachedDevice feeds it with the time from a request's entry to its
// completion callback; the metrics endpoint exports it as
// ubcache_requests_total, ubcache_request_errors_total,
// ubcache_request_bytes_total and ubcache_request_duration_seconds.
//
// Cost: requests run on several reactor threads at up to ~100k per second,
// so a counter shared by all of them, bumped with a locked read-modify-write,
// would move one cache line between CPUs on every request. Each reactor
// records into a Shard of its own instead (its slot is Reactor::id(); the
// shard is allocated on that reactor's first request), with a relaxed load
// and a relaxed store per field — no locked instruction, since a slot has
// one writer thread — and a reader sums the shards. (CacheStats, older,
// still bumps atomics shared by every reactor: a locked add per read that
// shards like these would remove too.)
//
// Thread safety: Record(slot, …) only from the thread that owns `slot` (the
// reactor whose id it is) — one writer per slot at a time; Read() from any
// thread, without a lock. A reader racing a request may see its count but
// not yet its bytes; they are statistics. There is no Clear(): another
// thread cannot zero a shard without a read-modify-write racing its
// writer, and the exported series are Prometheus counters, which never go
// down (`ctl clear-stats` clears the stats_* groups only).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "backend/reactor.h"

namespace ubcache {

class RequestStats {
 public:
  // BlockDevice's operations in IoOp's order, then the prefetch.
  enum Op : uint8_t { kRead, kWrite, kFlush, kDiscard, kWriteZeroes, kCache, kOps };
  // "read", "write", "flush", "discard", "write_zeroes", "cache": the op label.
  static const char* OpName(Op op);

  // The histogram's upper bounds (Prometheus `le`, inclusive), in ns and as
  // the label Prometheus' own clients write (Go's shortest %g form), then
  // +Inf: local NVMe hits fall in the first buckets, a spindle's seeks near
  // 10 ms, a queue behind a stalled device in the seconds.
  static constexpr int kBounds = 18;
  static constexpr int kBuckets = kBounds + 1;  // the last one is +Inf
  static constexpr std::array<uint64_t, kBounds> kBoundNs = {
      25'000,      50'000,      100'000,     250'000,       500'000,       1'000'000,
      2'500'000,   5'000'000,   10'000'000,  25'000'000,    50'000'000,    100'000'000,
      250'000'000, 500'000'000, 1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
  static const char* BucketLabel(int bucket);  // "2.5e-05" … "10", "+Inf"
  // The bucket a latency falls in: the first bound it does not exceed.
  static int BucketOf(uint64_t latency_ns) {
    int b = 0;
    while (b < kBounds && latency_ns > kBoundNs[b]) b++;
    return b;
  }

  struct OpTotals {
    uint64_t requests = 0;  // the histogram's count: every completed request
    uint64_t errors = 0;    // completed with an error to the client
    uint64_t bytes = 0;     // of successful reads and writes
    uint64_t sum_ns = 0;
    std::array<uint64_t, kBuckets> buckets{};  // per bucket, not cumulative
  };
  using Totals = std::array<OpTotals, kOps>;

  RequestStats() = default;
  ~RequestStats();
  RequestStats(const RequestStats&) = delete;
  RequestStats& operator=(const RequestStats&) = delete;

  static constexpr unsigned kSlots = Reactor::kMaxReactors;
  // A request of `op` over `len` bytes completed after `latency_ns`, with
  // `ok` false when it failed. `slot` < kSlots: the calling reactor's id.
  void Record(unsigned slot, Op op, uint64_t len, uint64_t latency_ns, bool ok) {
    Shard::PerOp& p = ShardFor(slot).ops[op];
    Add(p.buckets[BucketOf(latency_ns)], 1);
    Add(p.sum_ns, latency_ns);
    if (!ok)
      Add(p.errors, 1);
    else if (op == kRead || op == kWrite)
      Add(p.bytes, len);
  }

  // The sums over every shard. O(shards × buckets); no lock.
  Totals Read() const;

 private:
  struct alignas(64) Shard {
    struct PerOp {
      std::array<std::atomic<uint64_t>, kBuckets> buckets{};
      std::atomic<uint64_t> sum_ns{0}, errors{0}, bytes{0};
    };
    std::array<PerOp, kOps> ops{};
  };
  // The one writer's increment: no locked instruction (see the top).
  static void Add(std::atomic<uint64_t>& a, uint64_t n) {
    a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  Shard& ShardFor(unsigned slot) {
    Shard* s = shards_[slot].load(std::memory_order_acquire);
    return s ? *s : NewShard(slot);
  }
  Shard& NewShard(unsigned slot);

  // Read by every request, written once per reactor: whole cache lines of
  // their own, shared with no counter that a request writes.
  alignas(64) std::array<std::atomic<Shard*>, kSlots> shards_{};
};

}  // namespace ubcache
