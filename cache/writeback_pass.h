// SPDX-License-Identifier: Apache-2.0
// Writeback's per-pass state (private to cache/writeback*.cpp): the dirty
// pieces a pass read, the backing writes they make, and the stages' shared
// counters.
#pragma once

#include <memory>
#include <vector>

#include "btree/extent.h"
#include "cache/writeback.h"
#include "util/buffer_pool.h"
#include "util/status.h"

namespace ubcache {

struct Writeback::Piece {
  Extent e;
  Status st;           // of its read from the cache device (into w->buf)
  Write* w = nullptr;  // the backing write it is part of
  bool kept = false;   // a kept version (flush order), not an extent of the tree
};

// One backing write: contiguous pieces, at most kMaxRun bytes, submitted in
// chunks (kMaxRun, or kReaderChunk while a reader is active). Its pieces are
// read from the cache device straight into its buffer, each at its place.
struct Writeback::Write {
  uint64_t start, len;
  std::vector<Piece*> parts;
  unsigned reading = 0;  // parts whose cache read is still in flight
  PooledBuffer buf;      // the writeback thread's pool: no mapping per write
  Status st;                 // the first error of its chunks
  uint64_t issued = 0;       // bytes submitted
  unsigned outstanding = 0;  // chunks in flight
  bool cleaned = false;      // flushed and marked clean (or its error counted)
  bool complete() const { return issued == len && outstanding == 0; }
};

// A pass's state, shared by its stages.
struct Writeback::PassState {
  std::vector<Run> runs;  // claimed stripes (start == end: not taken)
  std::vector<std::unique_ptr<Piece>> pieces;
  std::vector<std::unique_ptr<Write>> writes;
  size_t reading = 0;   // cache reads in flight
  size_t inflight = 0;  // backing write chunks in flight
  size_t next = 0;      // the first write not wholly submitted
  bool failed = false;  // back off before the next pass
  bool flush_failed = false;
  uint64_t bytes = 0;        // marked clean
  uint64_t yield_until = 0;  // while a reader is active: no write before this
  uint64_t epoch = 0;        // flush order: the one epoch this pass writes
  size_t stale = 0;          // stale tree extents dropped (TakePiece)
  size_t stale_kept = 0;     // stale kept versions dropped (TakePiece)
  size_t refused = 0;        // runs a foreground write held (ClaimRuns)
};

}  // namespace ubcache
