// SPDX-License-Identifier: Apache-2.0
// BackingSuper: a formatted backing device's bcache superblock, and every
// change of the state it records — attach, detach, cache mode, dirty,
// clean. One place does the read-modify-write, so the ordering rules live
// once:
//  - MarkDirty() returns only when `dirty` is durable on the backing
//    device; the writeback path acknowledges no dirty write before that (a
//    crash must never leave dirty data in the cache behind a backing device
//    that says it can be used alone).
//  - MarkClean() is called only after writeback has drained and the backing
//    device was flushed (CachedDevice's writeback thread does both).
//  - RecordConsistentAsOf(t) is called only after the backing flush that
//    put every write acknowledged before t on the media; it never moves the
//    time back, and SetWritebackOrder(lba) clears it before any write in
//    address order (rule 16).
//  - Detach() is called only when nothing is dirty (ctl detach flushes
//    first); it writes bcache's detached state: none, zero set uuid.
// Every write is WriteBackingSuperblock's flush, write, flush.
//
// Thread safety: any thread; one mutex serialises the changes. The I/O is
// synchronous on the calling thread's Reactor (backend/sync_io.h), so call
// it from the serve thread, the control worker or the writeback thread,
// never from a reactor that serves clients. Lock order: mu_ is a leaf,
// held across the I/O, which takes no lock of the daemon's.
#pragma once

#include <atomic>
#include <memory>

#include "backend/block_device.h"
#include "cache/superblock.h"
#include "util/status.h"
#include "util/thread_annotations.h"

namespace ubcache {

class BackingSuper {
 public:
  // `raw` is the whole device (the superblock at 4 KiB); `sb` was just read from it.
  BackingSuper(BlockDevice* raw, BackingSuperblock sb) : raw_(raw), sb_(std::move(sb)) {}

  BlockDevice* device() const { return raw_; }
  BackingSuperblock Get() const EXCLUDES(mu_);
  BackingState state() const EXCLUDES(mu_);

  // Attached to `set_uuid`, state clean (dirty only ever by MarkDirty).
  Status Attach(const Uuid& set_uuid) EXCLUDES(mu_);
  Status Detach() EXCLUDES(mu_);
  Status SetCacheMode(CacheMode m) EXCLUDES(mu_);
  Status SetWritebackOrder(WritebackOrder o) EXCLUDES(mu_);
  // Rule 17: flush order suspended (a full cache, cache/ordered_gate.h):
  // what a switch to lba does to the promise — counted in lba_switches,
  // consistent_as_of cleared, durably — with the order itself kept. Until
  // ResumeOrder, MarkDirty promises no time either: writes reach the
  // device out of order meanwhile.
  Status SuspendOrder() EXCLUDES(mu_);
  void ResumeOrder() { order_suspended_.store(false); }
  Status MarkDirty() EXCLUDES(mu_);
  Status MarkClean() EXCLUDES(mu_);
  // Writeback in `flush` order has put on the device, and flushed, every
  // write acknowledged before unix second t (doc/design.md rule 16): records
  // it as consistent_as_of if dirty, in flush order, later than the
  // recorded time, and if the order was not set to lba since the caller
  // read lba_switches() (a write in lba order may have overtaken older
  // epochs meanwhile). The writeback thread only, at most once a second.
  Status RecordConsistentAsOf(uint64_t t, uint64_t lba_switches_seen) EXCLUDES(mu_);
  // How many times SetWritebackOrder(lba) ran: each clears the promise
  // before the knob changes, so before any write in lba order.
  uint64_t lba_switches() const;

 private:
  template <typename Fn>
  Status Change(Fn fn) EXCLUDES(mu_);

  BlockDevice* const raw_;
  mutable Mutex mu_;
  BackingSuperblock sb_ GUARDED_BY(mu_);
  std::atomic<uint64_t> lba_switches_{0};
  std::atomic<bool> order_suspended_{false};
};

}  // namespace ubcache
