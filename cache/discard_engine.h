// SPDX-License-Identifier: Apache-2.0
// DiscardEngine: a client discard or write-zeroes of one cached device. It
// follows the write-through rules: the range's clean copies go at once and
// their removal is committed before the backing device gets the request
// (rule 5, RangeGuard::BeforeBackingWrite); over dirty data the range is
// held against writeback, the request is made durable on the backing
// device (write-zeroes FUA; a discard, which has no FUA, flushed after it)
// before the commit that drops the dirty copies, and acknowledged after
// that commit; a failed request keeps the dirty copies (still the data).
//
// Thread safety: reactor threads; a request's state lives in its callbacks.
#pragma once

#include "backend/block_device.h"
#include "cache/engine_context.h"

namespace ubcache {

class DiscardEngine {
 public:
  explicit DiscardEngine(const EngineContext& ctx) : c_(ctx) {}

  void Discard(const IoRequest& req, IoDone done);

 private:
  // The backing device has answered `st`: drop the range, release, ack.
  // Once the range's clean copies are gone from the index: to the backing device.
  void Issue(const IoRequest& req, bool has_dirty, bool dropped_clean, IoDone done);
  void Complete(const IoRequest& req, bool has_dirty, Status st, IoDone done);

  const EngineContext c_;
};

}  // namespace ubcache
