// SPDX-License-Identifier: Apache-2.0
#include "cache/flush_engine.h"

#include "cache/cache_set.h"

namespace ubcache {

void FlushEngine::Flush(IoDone done) {
  // Three parts: backing device (rule 8: when it needs it), cache device, journal.
  struct FlushOp {
    IoDone done;
    int pending = 3;
    Status status;
  };
  auto* op = new FlushOp();
  op->done = std::move(done);
  auto part = [op](Status st) {
    if (!st.ok() && op->status.ok()) op->status = std::move(st);
    if (--op->pending > 0) return;
    IoDone d = std::move(op->done);
    Status s = std::move(op->status);
    delete op;
    d(std::move(s));
  };
  // The backing device only when a client write reached it since the last
  // backing flush: writeback-mode writes are durable on the cache, and
  // writeback flushes what it writes itself before it marks anything clean.
  // Sampled here, after the FLUSH arrived: every write acknowledged before
  // it counted itself before its acknowledgement (BackingWriteDone).
  uint64_t written = backing_writes_.load(std::memory_order_seq_cst);
  if (written == backing_flushed_.load(std::memory_order_seq_cst)) {
    part(Status::OK());
  } else {
    c_.backing->Flush([this, written, part](Status st) {
      if (st.ok()) {
        uint64_t seen = backing_flushed_.load(std::memory_order_seq_cst);
        while (seen < written && !backing_flushed_.compare_exchange_weak(seen, written)) {
        }
      }
      part(std::move(st));
    });
  }
  c_.set->cache_dev()->Flush(part);
  c_.set->CommitAsync(part);
}

}  // namespace ubcache
