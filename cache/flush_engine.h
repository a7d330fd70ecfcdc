// SPDX-License-Identifier: Apache-2.0
// FlushEngine: a client FLUSH of one cached device. Like a disk's volatile
// cache: every write acknowledged before it is durable when it returns —
// the cache device flushed, the journal committed (which flushes the cache
// device first), and the backing device flushed when a client write or
// discard reached it since the last backing flush (ordering rule 8 of
// doc/design.md, BackingDurability::FlushForClient). In writeback, a FLUSH
// so does not wait behind writeback's queue on the spindle for writes it
// does not cover. It first closes the device's write epoch (rule 11): the
// writes inserted after it arrived are in a later epoch.
//
// Thread safety: any reactor thread; the pieces it uses are thread-safe.
#pragma once

#include "backend/block_device.h"
#include "cache/engine_context.h"

namespace ubcache {

class FlushEngine {
 public:
  explicit FlushEngine(const EngineContext& ctx) : c_(ctx) {}

  void Flush(IoDone done);

 private:
  const EngineContext c_;
};

}  // namespace ubcache
