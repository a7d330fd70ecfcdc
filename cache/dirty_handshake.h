// SPDX-License-Identifier: Apache-2.0
// DirtyHandshake: the backing superblock's clean <-> dirty handshake
// between one device's writeback-mode writes (foreground, reactor threads)
// and its writeback thread, which alone writes the backing superblock.
// Ordering rule 7 of doc/design.md: `dirty` is durable on the backing device
// before the first dirty write is acknowledged, and `clean` is written only
// once nothing is dirty or in flight.
//
//   write:  Enter() (counts itself, then reads dirty_ok, both seq_cst)
//           ... data to the cache, insert dirty ... Leave()
//   thread: CloseForClean() (dirty_ok = false, seq_cst), then
//           WritesInFlight() and the dirty bytes: both zero -> mark clean.
// Either the thread sees the write's count, or the write sees dirty_ok
// false and parks until the thread has marked the superblock dirty again;
// so the superblock is never marked clean under a write it did not see.
//
// Thread safety: any thread. mu_ is a leaf lock: no call is made under it.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "backend/reactor.h"
#include "util/callback.h"
#include "util/thread_annotations.h"

namespace ubcache {

class DirtyHandshake {
 public:
  // `dirty`: the backing superblock says dirty already (a restart with dirty data).
  explicit DirtyHandshake(bool dirty) : dirty_ok_(dirty) {}

  // ---- writeback-mode writes ----
  // True: the superblock is durably dirty, the write may go on and calls
  // Leave() once its insert is done (or it gave up). False: the write is
  // parked and the writeback thread must be kicked to mark the superblock
  // dirty; the callback `make_retry()` returns (made only then, so the
  // request's completion stays the caller's otherwise) runs on this reactor
  // once that is decided, with `refused` set when it failed (the write then
  // goes through, or it would wait for as long as the backing device is out).
  template <typename MakeRetry>
  bool Enter(MakeRetry&& make_retry) EXCLUDES(mu_) {
    // Counted first, then the state read (both seq_cst): see the top.
    inflight_.fetch_add(1, std::memory_order_seq_cst);
    if (dirty_ok_.load(std::memory_order_seq_cst)) return true;
    MutexLock l(&mu_);
    if (dirty_ok_.load(std::memory_order_seq_cst)) return true;
    ParkLocked(make_retry());
    return false;
  }
  void Leave() { inflight_.fetch_sub(1, std::memory_order_seq_cst); }

  // ---- the writeback thread ----
  // A parked write asked for `dirty` (and the request is consumed).
  bool TakeDirtyRequest() { return want_dirty_.exchange(false); }
  bool dirty_requested() const { return want_dirty_.load(); }
  // The first half of marking clean: no write may go dirty from here on
  // without parking.
  void CloseForClean() { dirty_ok_.store(false, std::memory_order_seq_cst); }
  bool WritesInFlight() const { return inflight_.load(std::memory_order_seq_cst) != 0; }
  // Whether dirty writes may be acknowledged (the superblock durably says
  // dirty); wakes the parked writes when `ok`, or when it failed and no
  // later request is pending. Also the fence's: false lets them fail.
  void SetDirtyOk(bool ok) EXCLUDES(mu_);

 private:
  void ParkLocked(Callback<void(bool refused)> retry) REQUIRES(mu_);
  struct Parked {
    Reactor* reactor;
    Callback<void()> fn;
  };
  std::atomic<bool> dirty_ok_;
  std::atomic<bool> want_dirty_{false};
  // Writeback-mode writes between Enter's check and their insert.
  std::atomic<uint64_t> inflight_{0};
  Mutex mu_;
  std::vector<Parked> parked_ GUARDED_BY(mu_);
};

}  // namespace ubcache
