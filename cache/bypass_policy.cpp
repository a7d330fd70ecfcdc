// SPDX-License-Identifier: Apache-2.0
#include "cache/bypass_policy.h"

#include "cache/cache_set.h"
#include "util/clock.h"

namespace ubcache {

const char* BypassPolicy::KindName(Kind kind) {
  static constexpr const char* kNames[kKinds] = {"read", "write", "write_fua", "write_after_flush"};
  return kind < kKinds ? kNames[kind] : "?";
}

void BypassPolicy::MarkSyncHint(uint32_t* flags) {
  // The first write since a FLUSH arrived clears the mark; the load first
  // keeps the common case (no FLUSH since) to a read of a shared line.
  bool first = !write_since_flush_.load(std::memory_order_relaxed) &&
               !write_since_flush_.exchange(true, std::memory_order_relaxed);
  if (first || flushes_in_flight_.load(std::memory_order_relaxed) > 0) *flags |= kIoAfterFlush;
}

bool BypassPolicy::Bypassed(const IoRequest& req, bool write) {
  Kind kind = !write                       ? kRead
              : (req.flags & kIoFua)       ? kWriteFua
              : (req.flags & kIoAfterFlush) ? kWriteAfterFlush
                                           : kWrite;
  bypasses_[kind].fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool BypassPolicy::ShouldBypass(const IoRequest& req, bool write, bool* around_cache) {
  CacheKnobs& k = set_->knobs();
  CacheMode mode = k.cache_mode.load(std::memory_order_relaxed);
  if (mode == CacheMode::kNone) return true;
  if (write && mode == CacheMode::kWritearound) return true;
  uint64_t cutoff = k.sequential_cutoff.load(std::memory_order_relaxed);
  uint32_t read_us = k.congested_read_threshold_us.load(std::memory_order_relaxed);
  uint32_t write_us = k.congested_write_threshold_us.load(std::memory_order_relaxed);
  uint64_t now = NowNanos();
  // bcache's score, from the fixed thresholds only ("auto" takes no part).
  uint64_t congested = set_->congestion().CongestedCutoff(FixedThresholdUs(read_us),
                                                          FixedThresholdUs(write_us), now / 1000);
  bool auto_congested =
      (write ? write_us : read_us) == kAutoThresholdUs &&
      AutoCongested(set_->cache_time(), *backing_time_,
                    write ? ServiceTime::Op::kWrite : ServiceTime::Op::kRead, req.len, now);
  if (cutoff == 0 && congested == 0 && !auto_congested) return false;
  // bcache's check_should_bypass: in writeback, a sync write is cached
  // whatever its stream, and whatever the auto congestion says; only
  // bcache's fixed congestion overrides it. Sync: FUA or after a FLUSH (the
  // hints NBD and ublk carry), or in a stream that had such a write within
  // SequentialDetector::kSyncWindowNanos — a journal's log blocks, whose
  // commit records carry the hint. Sent to the backing device it would make
  // the next FLUSH flush the spindle behind writeback's queue (rule 8), and
  // every fsync wait.
  bool sync = write && (req.flags & (kIoFua | kIoAfterFlush));
  const uint64_t run = detector_.Observe(dev_, req.offset, req.len, now, write ? &sync : nullptr);
  if (sync && mode == CacheMode::kWriteback && congested == 0) return false;
  if (auto_congested) {
    auto_congested_bypasses_.fetch_add(1, std::memory_order_relaxed);
    if (around_cache) *around_cache = true;
    return Bypassed(req, write);
  }
  bool sequential = cutoff == kAutoCutoff ? run >= kAutoStreamBytes && !AdmitStream(req, now)
                                          : cutoff && run >= cutoff;
  if (sequential) {
    sequential_bypasses_.fetch_add(1, std::memory_order_relaxed);
    return Bypassed(req, write);
  }
  if (congested && run >= congested) {
    congested_bypasses_.fetch_add(1, std::memory_order_relaxed);
    return Bypassed(req, write);
  }
  return false;
}

bool BypassPolicy::AdmitStream(const IoRequest& req, uint64_t now_ns) {
  BucketAllocator& b = set_->buckets();
  BucketAllocator::Usage u = b.usage();
  // Free buckets, and those GC found empty: caching the stream in either
  // drops no cached data.
  if (SpareSpace(u.free + u.dead, b.free_target(), u.buckets - u.reserved)) {
    spare_admissions_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  MutexLock l(&ghost_mu_);
  if (ghosts_.Contains(dev_, req.offset, req.len, now_ns)) {
    ghost_admissions_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  ghosts_.Add(dev_, req.offset, req.len, now_ns);
  return false;
}

}  // namespace ubcache
