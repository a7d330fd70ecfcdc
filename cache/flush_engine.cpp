// SPDX-License-Identifier: Apache-2.0
#include "cache/flush_engine.h"

#include "cache/backing_durability.h"
#include "btree/write_epoch.h"
#include "cache/cache_set.h"

namespace ubcache {

void FlushEngine::Flush(IoDone done) {
  // Three parts: backing device (rule 8: when it needs it), cache device, journal.
  struct FlushOp {
    IoDone done;
    int pending = 3;
    Status status;
  };
  // Rule 11: every write inserted from here on is in a later epoch than
  // every write acknowledged before this FLUSH arrived.
  c_.epoch->Close();
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
  // backing flush (rule 8): writeback-mode writes are durable on the cache,
  // and writeback flushes what it writes itself before it marks anything
  // clean. A flush it does issue also covers the provisional clean copies
  // of the entries written before it (rule 9).
  c_.durability->FlushForClient(part);
  c_.set->cache_dev()->Flush(part);
  c_.set->CommitAsync(part);
}

}  // namespace ubcache
