// SPDX-License-Identifier: Apache-2.0
#include "cache/range_guard.h"

#include <algorithm>
#include <memory>

#include "cache/cache_set.h"
#include "cache/index_call.h"
#include "util/log.h"

namespace ubcache {

bool RangeGuard::ClaimForWriteback(uint64_t start, uint64_t end) {
  MutexLock l(&mu_);
  // A foreground write over dirty data owns the range until its insert: the
  // dirty copy it replaces must not be written back over its data.
  for (const Range& r : ranges_)
    if (!r.writeback && r.start < end && start < r.end) return false;
  ranges_.push_back({start, end, true});
  claims_.fetch_add(1, std::memory_order_seq_cst);
  return true;
}

void RangeGuard::ReleaseWriteback(uint64_t start, uint64_t end) {
  Release(start, end, true);
}

void RangeGuard::ReleaseForeground(uint64_t start, uint64_t end) {
  Release(start, end, false);
}

void RangeGuard::Release(uint64_t start, uint64_t end, bool writeback) {
  std::vector<Waiter> ready;
  {
    MutexLock l(&mu_);
    auto it = std::find_if(ranges_.begin(), ranges_.end(), [&](const Range& r) {
      return r.start == start && r.end == end && r.writeback == writeback;
    });
    if (it != ranges_.end()) ranges_.erase(it);
    if (writeback) claims_.fetch_sub(1, std::memory_order_seq_cst);
    for (size_t i = 0; i < waiters_.size();) {
      Waiter& w = waiters_[i];
      if (OverlapsWritebackLocked(w.start, w.end)) {
        i++;
        continue;
      }
      if (w.hold) ranges_.push_back({w.start, w.end, false});
      ready.push_back(std::move(w));
      waiters_.erase(waiters_.begin() + static_cast<long>(i));
    }
  }
  for (Waiter& w : ready) w.reactor->Post(std::move(w.fn));
}

bool RangeGuard::OverlapsWritebackLocked(uint64_t start, uint64_t end) const {
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [&](const Range& r) { return r.writeback && r.start < end && start < r.end; });
}

void RangeGuard::AfterWriteback(uint64_t start, uint64_t end, Callback<void()> fn) {
  // The caller invalidated the range before this (seq_cst) load: either the
  // writeback thread's later lookup no longer finds the old extents, or its
  // claim is seen here (Writeback::Pass claims, then looks up).
  if (claims_.load(std::memory_order_seq_cst) != 0) {
    MutexLock l(&mu_);
    if (OverlapsWritebackLocked(start, end)) {
      waiters_.push_back({start, end, false, Reactor::Current(), std::move(fn)});
      return;
    }
  }
  fn();
}

void RangeGuard::HoldForeground(uint64_t start, uint64_t end, Callback<void()> fn) {
  {
    MutexLock l(&mu_);
    if (OverlapsWritebackLocked(start, end)) {
      waiters_.push_back({start, end, true, Reactor::Current(), std::move(fn)});
      return;
    }
    ranges_.push_back({start, end, false});
  }
  fn();
}

void RangeGuard::AfterCleanCopiesGone(uint64_t offset, uint64_t len, bool dropped,
                                      Callback<void()> fn) {
  if (!set_) {
    fn();
    return;
  }
  auto again = std::make_shared<uint64_t>(0);
  // The index without waiting on this reactor (index_call.h).
  CallIndex(
      set_,
      [this, offset, len, again] {
        bool dirty_left = false;
        return set_->index().InvalidateClean(dev_, offset, len, &dirty_left, again.get());
      },
      [this, dropped, again, fn = std::move(fn)](Status ist) mutable {
        if (!ist.ok()) UB_WARN("{}: index invalidate failed: {}", spec_, ist.ToString());
        CommitThen(dropped || *again > 0 || !ist.ok(), std::move(fn));
      });
}

void RangeGuard::CommitThen(bool needed, Callback<void()> fn) {
  if (!needed || !set_->persistent()) {
    fn();
    return;
  }
  set_->CommitAsync([this, fn = std::move(fn)](Status st) mutable {
    // Not durable: a power cut before a later commit may still bring the
    // clean copy back; the write itself goes on (the backing device is the
    // truth for it, and the cache's error is counted where it happened).
    if (!st.ok())
      UB_WARN("{}: journal commit before a backing write failed ({}); writing anyway", spec_,
              st.ToString());
    fn();
  });
}

void RangeGuard::BeforeBackingWrite(uint64_t offset, uint64_t len, bool over_dirty,
                                    bool dropped_clean, Callback<void()> issue) {
  auto after_clean = [this, offset, len, dropped_clean, issue = std::move(issue)]() mutable {
    AfterCleanCopiesGone(offset, len, dropped_clean, std::move(issue));
  };
  if (over_dirty)
    HoldForeground(offset, offset + len, std::move(after_clean));
  else
    AfterWriteback(offset, offset + len, std::move(after_clean));
}

}  // namespace ubcache
