// SPDX-License-Identifier: Apache-2.0
#include "cache/bypass_policy.h"

#include "cache/cache_set.h"
#include "util/clock.h"

namespace ubcache {

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
  // bcache's check_should_bypass: in writeback, a sync write (here: FUA, the
  // only sync hint NBD and ublk carry — a journal commit, an O_DSYNC write)
  // is cached whatever its stream, unless the cache is congested; making it
  // wait for the backing device is what the cache is there to avoid.
  if (write && mode == CacheMode::kWriteback && (req.flags & kIoFua) && congested == 0 &&
      !auto_congested)
    return false;
  uint64_t run;
  {
    MutexLock l(&detector_mu_);
    run = detector_.Observe(dev_, req.offset, req.len, now);
  }
  if (auto_congested) {
    auto_congested_bypasses_.fetch_add(1, std::memory_order_relaxed);
    if (around_cache) *around_cache = true;
    return true;
  }
  bool sequential = cutoff == kAutoCutoff ? run >= kAutoStreamBytes && !AdmitStream(req, now)
                                          : cutoff && run >= cutoff;
  if (sequential) {
    sequential_bypasses_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (congested && run >= congested) {
    congested_bypasses_.fetch_add(1, std::memory_order_relaxed);
    return true;
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
  MutexLock l(&detector_mu_);
  if (ghosts_.Contains(dev_, req.offset, req.len, now_ns)) {
    ghost_admissions_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  ghosts_.Add(dev_, req.offset, req.len, now_ns);
  return false;
}

}  // namespace ubcache
