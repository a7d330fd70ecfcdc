// SPDX-License-Identifier: Apache-2.0
// WriteThroughEngine: a client write that goes to the backing device —
// writethrough (backing and cache device in parallel, the new extent
// inserted clean once both have it, then the ack), and writearound, none,
// bypassed and detached writes (the backing device only; the range is
// invalidated again when done, killing fills of misses that read the old
// data meanwhile). Also the fallback of a writeback-mode write the cache
// could not take. The router (CachedDevice) has marked the range changed;
// its clean copies are removed here, and the removal committed, before the
// backing write (rule 5); dirty ones stay until this write replaces them.
//
// Ordering (doc/design.md "Durability"): the backing write goes through
// RangeGuard::BeforeBackingWrite (rule 5); over dirty data it is FUA and
// the ack waits for the commit that drops the dirty copy (rule 5); a FUA
// write commits before its ack; the backing write counts itself for FLUSH
// (rule 8); buckets are released after the insert (rule 1); the clean copy
// is journaled provisional unless the backing write was FUA (rule 9,
// BackingDurability::InsertClean).
//
// Thread safety: reactor threads; a request's state lives on its reactor.
#pragma once

#include <atomic>

#include "backend/block_device.h"
#include "cache/engine_context.h"

namespace ubcache {

class WriteThroughEngine {
 public:
  explicit WriteThroughEngine(const EngineContext& ctx) : c_(ctx) {}

  // `bypass`: the backing device only. `has_dirty`: dirty copies of the
  // range are still in the index.
  void Write(const IoRequest& req, IoDone done, bool bypass, bool has_dirty);

 private:
  struct WriteOp;
  // The cache copy of a write-through write, piece by piece (none when full).
  void WriteCacheCopy(WriteOp* op);
  // The op's last part completed: insert or invalidate, release, ack.
  void Complete(WriteOp* op);
  // Complete's index update, run again after a node read when it returns
  // WouldBlock (it goes on where it stopped); then Finish acknowledges.
  Status UpdateIndex(WriteOp* op);
  void Finish(WriteOp* op);

  const EngineContext c_;
};

}  // namespace ubcache
