// SPDX-License-Identifier: Apache-2.0
#include "cache/request_stats.h"

namespace ubcache {

const char* RequestStats::OpName(Op op) {
  switch (op) {
    case kRead: return "read";
    case kWrite: return "write";
    case kFlush: return "flush";
    case kDiscard: return "discard";
    case kWriteZeroes: return "write_zeroes";
    case kCache: return "cache";
    case kOps: break;
  }
  return "?";
}

const char* RequestStats::BucketLabel(int bucket) {
  static constexpr const char* kLabels[kBuckets] = {
      "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
      "0.05",    "0.1",   "0.25",   "0.5",     "1",      "2.5",   "5",      "10",    "+Inf"};
  return bucket >= 0 && bucket < kBuckets ? kLabels[bucket] : "?";
}

RequestStats::~RequestStats() {
  for (auto& s : shards_) delete s.load(std::memory_order_acquire);
}

RequestStats::Shard& RequestStats::NewShard(unsigned slot) {
  // Only the slot's own thread gets here; the CAS keeps a misuse (two
  // threads on one slot) from leaking a shard.
  Shard* fresh = new Shard();
  Shard* expected = nullptr;
  if (shards_[slot].compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *expected;
}

RequestStats::Totals RequestStats::Read() const {
  Totals t{};
  for (const auto& slot : shards_) {
    const Shard* s = slot.load(std::memory_order_acquire);
    if (!s) continue;
    for (int op = 0; op < kOps; op++) {
      const Shard::PerOp& p = s->ops[op];
      OpTotals& o = t[op];
      for (int b = 0; b < kBuckets; b++) {
        uint64_t n = p.buckets[b].load(std::memory_order_relaxed);
        o.buckets[b] += n;
        o.requests += n;
      }
      o.sum_ns += p.sum_ns.load(std::memory_order_relaxed);
      o.errors += p.errors.load(std::memory_order_relaxed);
      o.bytes += p.bytes.load(std::memory_order_relaxed);
    }
  }
  return t;
}

}  // namespace ubcache
