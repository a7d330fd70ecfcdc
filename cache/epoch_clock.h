// SPDX-License-Identifier: Apache-2.0
// EpochClock: when a device's write epochs began, on the wall clock, so
// that the lag of `flush`-order writeback can be said in seconds
// (`writeback_lag_seconds`) and the backing superblock can promise a time
// (`consistent_as_of`, doc/design.md rule 16).
//
// The one question it answers: for the oldest epoch k still dirty, a time T
// such that no write of epoch k or later was acknowledged before T. Then the
// backing device, which holds every epoch before k (rule 13), holds every
// write acknowledged before T: consistent as of T. T may be earlier than
// the truth (conservative), never later.
//
// How: a dirty write reads the clock (t) BEFORE its insert takes an epoch,
// and after the insert stamps every epoch it may have taken ([first, last]:
// current() before and after) with t, unless the newest stamped epoch is
// already at least `last`. A stamp keeps the minimum of the times offered.
// Why T(k) = the stamp of the newest stamped epoch e <= k is safe:
//  - e == k: a write W of epoch k checks after its insert, before its ack.
//    If no stamp covered k yet, W stamps it with its t < its ack; if one
//    did, it was set, with some t0 read earlier, before W's check, so W's
//    ack is later than t0 >= the final minimum.
//  - e < k: T(e) was read before some insert that took an epoch <= e, so
//    before epoch e was closed, so before any write of a later epoch.
// Lowering a stamp is always safe (a smaller T promises less), so a write
// may stamp epochs it did not take, and stamps may be thinned out (below).
//
// After a restart the epochs the index already holds have no stamps: they
// share the floor given to Start — the backing superblock's
// consistent_as_of, or its dirty_since (every write before it is on the
// device), both true of every epoch still dirty.
//
// Memory: one stamp per epoch that took a dirty write, pruned by Forget as
// writeback passes epochs; past kMaxStamps every other old stamp is dropped
// (safe: lookups fall back to an earlier one).
//
// Thread safety: any thread. Stamped() is one atomic load (the dirty write
// path); the rest takes a leaf mutex, once per epoch on the write path.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

#include "util/thread_annotations.h"

namespace ubcache {

class EpochClock {
 public:
  static constexpr size_t kMaxStamps = 1 << 16;

  // Before any write: every epoch up to `newest` (what the index holds)
  // began no earlier than `floor_ms` (unix milliseconds).
  void Start(uint64_t newest, uint64_t floor_ms) EXCLUDES(mu_);
  // Whether a dirty write of an epoch <= `last` may skip Stamp.
  bool Stamped(uint64_t last) const { return stamped_through_.load(std::memory_order_acquire) >= last; }
  // A dirty write read `t_ms` before its insert took an epoch in [first, last].
  void Stamp(uint64_t first, uint64_t last, uint64_t t_ms) EXCLUDES(mu_);
  // For the oldest epoch still dirty: unix ms T before which no write of it
  // or a later epoch was acknowledged (0 if nothing is known).
  uint64_t AsOf(uint64_t oldest) const EXCLUDES(mu_);
  // The lag at unix ms `now_ms`: now minus AsOf(oldest); 0 with nothing
  // dirty (no oldest) or nothing known.
  uint64_t LagMs(std::optional<uint64_t> oldest, uint64_t now_ms) const EXCLUDES(mu_);
  // Epochs before `oldest` are written back (or, with nothing dirty, every
  // epoch before the current one): forgets their stamps, but for the one
  // AsOf(oldest) falls back on.
  void Forget(uint64_t oldest) EXCLUDES(mu_);
  size_t stamps() const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::deque<std::pair<uint64_t, uint64_t>> stamps_ GUARDED_BY(mu_);  // (epoch, unix ms), by epoch
  std::atomic<uint64_t> stamped_through_{0};
};

// Unix milliseconds (CLOCK_REALTIME): what the superblock's times are in.
uint64_t UnixMillis();

}  // namespace ubcache
