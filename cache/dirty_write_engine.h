// SPDX-License-Identifier: Apache-2.0
// DirtyWriteEngine: the foreground write of writeback mode — a client
// write's data to the cache device only, inserted dirty, acknowledged after
// a soft journal commit (FUA: a hard one). Not to be confused with the
// background writeback thread (cache/writeback.h), which later writes that
// dirty data to the backing device.
//
// Accepts() is bcache's should_writeback (cutoffs as percent of the cache
// in use); a write it turns away, or one the cache cannot take (no space,
// or the cache write failed), goes through WriteThroughEngine instead —
// in `flush` order after the router's OrderedGate (rule 14), which is why
// that order absorbs writes past cutoff_writeback up to the sync cutoff.
//
// Ordering (doc/design.md "Durability"):
//  - rule 7: the backing superblock durably dirty before the first dirty
//    ack (DirtyHandshake::Enter; a write that must wait is re-run by the
//    router, `Rewrite`, once the writeback thread has decided);
//  - rule 1: the insert after the data write, the buckets released after
//    the insert;
//  - rule 2: the ack after the journal entry (CacheSet::CommitAsync).
//
// Thread safety: reactor threads; a request's state lives on its reactor.
#pragma once

#include <atomic>
#include <functional>

#include "backend/block_device.h"
#include "cache/engine_context.h"

namespace ubcache {

class DirtyHandshake;
class Writeback;
class WriteThroughEngine;

class DirtyWriteEngine {
 public:
  // The router's write entry: a write parked by the handshake starts again
  // there (`dirty_refused`: marking the superblock dirty failed).
  using Rewrite = std::function<void(const IoRequest& req, IoDone done, bool dirty_refused)>;

  DirtyWriteEngine(const EngineContext& ctx, DirtyHandshake* handshake, WriteThroughEngine* through,
                   Rewrite rewrite)
      : c_(ctx), handshake_(handshake), through_(through), rewrite_(std::move(rewrite)) {}

  // Whether a write in writeback mode goes dirty into the cache (bcache's
  // should_writeback). A write over dirty data always does (below the sync
  // cutoff); `wb`: the device's writeback thread, kicked when the cutoffs
  // turn writes away.
  bool Accepts(const IoRequest& req, bool overlaps_dirty, bool bypass, Writeback* wb);
  // Whether Accepts takes `req` whatever `overlaps_dirty` would be — not
  // bypassed, and below cutoff_writeback (a sync write: below the sync
  // cutoff) — without acting on it. The router then only marks the range
  // and skips the dirty lookup (ExtentIndex::MarkWrite).
  bool TakesWithoutLookup(const IoRequest& req, bool bypass) const;
  // The cache takes no dirty write at all: `in_use` (CacheSet::
  // in_use_percent) past cutoff_writeback_sync, or the epochs' state past
  // its checkpoint budget (Accepts' first test; the ordered gate's room
  // test is its negation).
  bool Full(unsigned in_use) const;
  // False when the cache cannot take it (no space): `done` is left with the
  // caller, which writes through instead. `has_dirty`: dirty data overlaps
  // the range, or it was not looked up (TakesWithoutLookup) — the through
  // road a failed cache write takes then is the one over dirty data.
  bool Write(const IoRequest& req, IoDone& done, bool has_dirty, Writeback* wb);

  // Writes turned to write-through by cutoff_writeback (_sync for FUA).
  uint64_t cutoff_writethroughs() const {
    return cutoff_writethroughs_.load(std::memory_order_relaxed);
  }

 private:
  struct DirtyOp;
  // Accepts()'s "no" for a write the cache in use turned away: counts it and
  // speeds writeback up. Always false.
  bool WriteThroughAtCutoff(Writeback* wb);
  // The cache writes are done: insert dirty, release, ack after the soft
  // commit (or write through when the cache could not take it).
  void Complete(DirtyOp* op);
  // Write found no bucket ready on a serving reactor: run the write again
  // (rewrite_) when the allocator has journaled reclaimed buckets.
  void ParkForSpace(const IoRequest& req, IoDone& done);
  // Complete's inserts, run again after a node read when they return
  // WouldBlock (going on where they stopped); then Finish releases and acks.
  Status InsertDirty(DirtyOp* op);
  void Finish(DirtyOp* op);

  const EngineContext c_;
  DirtyHandshake* const handshake_;
  WriteThroughEngine* const through_;
  const Rewrite rewrite_;
  std::atomic<uint64_t> cutoff_writethroughs_{0};
};

}  // namespace ubcache
