// SPDX-License-Identifier: Apache-2.0
// FlushEngine: a client FLUSH of one cached device. Like a disk's volatile
// cache: every write acknowledged before it is durable when it returns —
// the cache device flushed, the journal committed (which flushes the cache
// device first), and the backing device flushed when a client write or
// discard reached it since the last backing flush (ordering rule 8 of
// doc/design.md). In writeback, a FLUSH so does not wait behind writeback's
// queue on the spindle for writes it does not cover.
//
// Rule 8's count: every engine whose client write or discard reached the
// backing device calls BackingWriteDone() before acknowledging it.
//
// Thread safety: any reactor thread; the counts are seq_cst atomics.
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/block_device.h"
#include "cache/engine_context.h"

namespace ubcache {

class FlushEngine {
 public:
  explicit FlushEngine(const EngineContext& ctx) : c_(ctx) {}

  void Flush(IoDone done);
  // A client write (or discard) reached the backing device: the next FLUSH
  // flushes it. Called before that write is acknowledged.
  void BackingWriteDone() { backing_writes_.fetch_add(1, std::memory_order_seq_cst); }

 private:
  const EngineContext c_;
  // Client writes that reached the backing device, and how many of them the
  // last completed backing flush covered. Starts one apart: the first FLUSH
  // also covers what an earlier daemon left in the backing device's
  // volatile cache.
  std::atomic<uint64_t> backing_writes_{1};
  std::atomic<uint64_t> backing_flushed_{0};
};

}  // namespace ubcache
