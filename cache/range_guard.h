// SPDX-License-Identifier: Apache-2.0
// RangeGuard: every "wait for this range" rule of one cached device, in one
// place (librbd's BlockGuard does the same job: detain, release, over one
// interval list). Two kinds of holder:
//  - the writeback thread's claim on a range it is writing back
//    (ClaimForWriteback .. ReleaseWriteback);
//  - a foreground write or discard over dirty data, from its backing I/O to
//    its insert (HoldForeground .. ReleaseForeground): the writeback thread
//    must not write back the dirty copy it is replacing.
// and the third rule, which waits for the journal rather than a holder:
//  - clean copies of a range whose removal must be committed before the
//    backing device gets anything newer (AfterCleanCopiesGone).
// BeforeBackingWrite chains the rules a foreground backing write obeys
// (ordering rule 5 of doc/design.md), so every engine issues its backing I/O
// through that one step.
//
// A waiting callback runs on the reactor it was parked from (Post), so the
// engines' per-request state stays on its reactor thread.
//
// Thread safety: any thread. mu_ is a leaf lock: no call is made under it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/reactor.h"
#include "util/callback.h"
#include "util/thread_annotations.h"

namespace ubcache {

class CacheSet;

class RangeGuard {
 public:
  // `set`, `dev`: whose index the clean-copy rule commits (null set: that
  // rule runs its callback at once, for tests of the range rules alone).
  RangeGuard(std::string spec, CacheSet* set, uint32_t dev)
      : spec_(std::move(spec)), set_(set), dev_(dev) {}

  // ---- the writeback thread ----
  // Claims [start, end) for writeback; false when a foreground write over
  // dirty data holds part of it (the thread skips it this pass). Called
  // before the range's dirty extents are looked up: see AfterWriteback.
  bool ClaimForWriteback(uint64_t start, uint64_t end) EXCLUDES(mu_);
  // Releases a claim; the foreground requests waiting for it go on.
  void ReleaseWriteback(uint64_t start, uint64_t end) EXCLUDES(mu_);

  // ---- foreground requests (reactor threads) ----
  // Runs fn (on this reactor) once no writeback claim overlaps
  // [start, end), so writeback's older copy never lands on the backing
  // device after this request's newer one.
  void AfterWriteback(uint64_t start, uint64_t end, Callback<void()> fn) EXCLUDES(mu_);
  // The same, then holds [start, end) until ReleaseForeground: the
  // writeback thread skips it meanwhile.
  void HoldForeground(uint64_t start, uint64_t end, Callback<void()> fn) EXCLUDES(mu_);
  void ReleaseForeground(uint64_t start, uint64_t end) EXCLUDES(mu_);
  // Drops the clean copies of [offset, offset+len): for a write, all of them
  // (the router only marks the range, ExtentIndex::MarkWrite); for a
  // discard, those made since its own InvalidateClean (the old dirty copy
  // written back and marked clean while it waited, a racing miss's fill).
  // Then runs fn on this reactor:
  // at once if none was dropped, now or before (`dropped`), or the set is
  // not persistent; else once their removal is committed. A clean copy is
  // only as good as the backing data it mirrors, so its removal must be on
  // media before the backing device can hold anything newer — else a power
  // cut recovers the clean copy over newer backing data, reads it until its
  // bucket is reclaimed, and then reads the backing data again: a write
  // seen lost after the cut comes back later.
  void AfterCleanCopiesGone(uint64_t offset, uint64_t len, bool dropped, Callback<void()> fn);
  // fn, after a commit when `needed` (and the set is persistent).
  void CommitThen(bool needed, Callback<void()> fn);
  // Ordering rule 5, the one step every foreground backing write or discard
  // goes through: waits for writeback over the range (and holds the range
  // when `over_dirty`), then for the removal of its clean copies, then
  // runs `issue`.
  void BeforeBackingWrite(uint64_t offset, uint64_t len, bool over_dirty, bool dropped_clean,
                          Callback<void()> issue);

  // Writeback claims held now (tests and ctl).
  uint32_t writeback_claims() const { return claims_.load(std::memory_order_relaxed); }

 private:
  struct Waiter {
    uint64_t start, end;
    bool hold;  // then holds the range as a foreground range
    Reactor* reactor;
    Callback<void()> fn;
  };
  struct Range {
    uint64_t start, end;
    bool writeback;  // the writeback thread's; else a foreground write over dirty data
  };
  void Release(uint64_t start, uint64_t end, bool writeback) EXCLUDES(mu_);
  bool OverlapsWritebackLocked(uint64_t start, uint64_t end) const REQUIRES(mu_);

  const std::string spec_;
  CacheSet* const set_;
  const uint32_t dev_;
  mutable Mutex mu_;
  std::vector<Range> ranges_ GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ GUARDED_BY(mu_);
  // Writeback claims in ranges_: AfterWriteback's lock-free fast path.
  std::atomic<uint32_t> claims_{0};
};

}  // namespace ubcache
