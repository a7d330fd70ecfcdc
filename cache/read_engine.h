// SPDX-License-Identifier: Apache-2.0
// ReadEngine: a client read of one cached device — hits, misses and their
// fills, bypassed reads — and NBD_CMD_CACHE's prefetch.
//
// The index splits the request into hits (extents whose bucket generation
// is still current) and misses. Hits are read from the cache device; a
// failed or stale cache read goes back to the backing device. Misses are
// read from the backing device, the client gets its data, and then — unless
// the request bypasses the cache — a copy is written to the cache and
// inserted with InsertIfUnchanged, so a miss racing a write never inserts
// stale data (that is a cache_miss_collision). With the set failed, dirty
// ranges answer EIO and the rest goes to the backing device.
//
// Thread safety: reactor threads; a request's state (ReadOp) lives on the
// reactor that submitted it, and never waits there: a lookup that needs an
// index node not in memory parks the request until the node is read.
#pragma once

#include <cstdint>

#include "backend/block_device.h"
#include "btree/extent.h"
#include "cache/engine_context.h"

namespace ubcache {

class BypassPolicy;

class ReadEngine {
 public:
  ReadEngine(const EngineContext& ctx, BypassPolicy* bypass) : c_(ctx), bypass_(bypass) {}

  // `start_ns`: a client read's entry, to record it in RequestStats when it
  // completes; 0 for a prefetch step, or when `done` records it.
  void Read(const IoRequest& req, IoDone done, bool prefetch = false, uint64_t start_ns = 0);
  // Reads the range through the cache in 1 MiB steps, one after another, so
  // a huge NBD_CMD_CACHE costs bounded memory; counted as cache_readaheads.
  void Prefetch(uint64_t offset, uint64_t len, IoDone done);

 private:
  struct ReadOp;
  // Looks the request up and issues its pieces; a node not in memory is
  // read first (on this reactor) and the lookup runs again. `loaded`: that
  // read's status (an error serves the request from the backing device).
  void LookupAndIssue(ReadOp* op, Status loaded);
  // The set failed: the backing device alone, EIO for dirty ranges.
  void ReadFailedCache(const IoRequest& req, IoDone done);
  // Hits that lie next to each other both in the request and on the cache
  // device (a fill's or a write's pieces, allocated one after another) are
  // read by one device read: a 1 MiB hit filled in 512 KiB pieces is one
  // read, as the same read of a plain file is.
  struct HitRun;
  // Whether `e` continues `run` on the device and in the request.
  static bool Extends(const HitRun& run, const Extent& e);
  void ReadHits(HitRun* run);
  void ReadBacking(ReadOp* op, uint64_t start, uint64_t len, bool was_hit);
  // `now_ns`: a clock reading the caller took at the piece's completion
  // (0: none; read here if this was the last piece).
  void PieceDone(ReadOp* op, Status st, uint64_t now_ns = 0);
  // Copies [start, start+len) of `data` into the cache and inserts it if
  // the range has not changed since `since`.
  void Fill(uint64_t start, uint64_t len, const uint8_t* data, uint64_t since);

  const EngineContext c_;
  BypassPolicy* const bypass_;
};

}  // namespace ubcache
