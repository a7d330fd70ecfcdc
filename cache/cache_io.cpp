// SPDX-License-Identifier: Apache-2.0
#include "cache/cache_io.h"

#include "cache/cache_set.h"
#include "util/clock.h"

namespace ubcache {

uint64_t CacheIo::piece_bytes() const {
  return set_->options().bucket_size;
}

bool CacheIo::AllocatePiece(uint64_t start, uint64_t len, bool dirty, Extent* out, bool* wait) {
  ReplacementPolicy policy = set_->knobs().replacement.load(std::memory_order_relaxed);
  auto space = set_->buckets().Allocate(Reactor::Current()->id(), len, policy);
  if (wait) *wait = !space.ok() && space.status().IsWouldBlock();
  if (!space.ok() && space.status().IsWouldBlock()) {
    space_waits_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (!space.ok()) {
    cache_full_bypasses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *out = Extent{.dev = dev_,
                .start = start,
                .len = len,
                .cache_offset = space->cache_offset,
                .gen = space->gen,
                .dirty = dirty};
  return true;
}

void CacheIo::WriteCache(const Extent& e, const uint8_t* data, Callback<void(bool)> done) {
  uint64_t t0 = NowNanos();
  set_->cache_dev()->Write(
      e.cache_offset, e.len, data, 0,
      [this, t0, len = e.len, done = std::move(done)](Status st) mutable {
        uint64_t now = NowNanos();
        set_->cache_time().Observe(ServiceTime::Op::kWrite, len, now - t0, now);
        set_->congestion().Observe((now - t0) / 1000,
                                   FixedThresholdUs(set_->knobs().congested_write_threshold_us.load(
                                       std::memory_order_relaxed)),
                                   now / 1000);
        if (!st.ok()) set_->CountIoError(st);
        done(st.ok());
      });
}

void CacheIo::ReleaseBuckets(const std::vector<Extent>& extents) {
  for (const Extent& e : extents)
    set_->buckets().WriteDone(set_->buckets().BucketOf(e.cache_offset));
}

void CacheIo::AckAfterCommit(IoDone done, Status st, bool commit) {
  if (!commit || !st.ok()) {
    done(std::move(st));
    return;
  }
  set_->CommitAsync(std::move(done));
}

}  // namespace ubcache
