// SPDX-License-Identifier: Apache-2.0
#include "cache/writethrough_engine.h"

#include <vector>

#include "cache/backing_durability.h"
#include "cache/cache_io.h"
#include "cache/cache_set.h"
#include "cache/index_call.h"
#include "cache/range_guard.h"
#include "cache/stats.h"
#include "util/clock.h"
#include "util/log.h"

namespace ubcache {

struct WriteThroughEngine::WriteOp {
  IoRequest req;
  IoDone done;
  int pending = 1;
  bool has_dirty = false;
  Status backing_status;
  bool cache_ok = true;
  bool commit = false;
  bool fua = false;  // the backing write: its data is durable when it completes
  std::vector<Extent> extents;  // written to the cache, to insert when all is done
  size_t inserted = 0;          // of extents, by UpdateIndex's passes so far
};

void WriteThroughEngine::Write(const IoRequest& req, IoDone done, bool bypass, bool has_dirty) {
  auto* op = new WriteOp();
  op->req = req;
  op->done = std::move(done);
  op->has_dirty = has_dirty;
  // Durability of what the index forgot: a FUA write, or one that replaced
  // dirty data, is acknowledged only once the invalidation is committed —
  // else a crash would replay the old copy (and writeback write it over
  // this one).
  op->commit = c_.set->persistent() && (has_dirty || (req.flags & kIoFua));
  if (bypass) c_.stats->CountBypassed(req.len);
  if (!bypass) WriteCacheCopy(op);
  // The backing write waits for any writeback of the range in flight, so
  // writeback's older copy never lands after it; over dirty data it also
  // holds the range until its insert, so writeback does not start on the
  // dirty copy it replaces.
  op->pending++;
  // Over dirty data the backing copy must be durable before the commit
  // that drops the dirty one (a power cut must find one or the other): FUA.
  uint32_t backing_flags = req.flags | (has_dirty ? uint32_t{kIoFua} : uint32_t{0});
  op->fua = (backing_flags & kIoFua) != 0;
  auto issue = [this, op, backing_flags]() mutable {
    uint64_t t0 = NowNanos();
    c_.durability->WriteIssuing(op->req.offset, op->req.len);  // rule 9: fills may read it from now on
    c_.backing->Write(
        op->req.offset, op->req.len, op->req.buf, backing_flags, [this, op, t0](Status st) mutable {
          c_.durability->WriteDone();  // rule 8
          uint64_t now = NowNanos();
          if (st.ok())
            c_.backing_time->Observe(ServiceTime::Op::kWrite, op->req.len, now - t0, now);
          op->backing_status = std::move(st);
          if (--op->pending == 0) Complete(op);
        });
  };
  // Rule 5: every clean copy of the range leaves the journal before the
  // backing device can hold this data (those the router left, and those
  // made while this write waited for writeback).
  c_.ranges->BeforeBackingWrite(req.offset, req.len, has_dirty, /*dropped_clean=*/false,
                                std::move(issue));
  if (--op->pending == 0) Complete(op);
}

void WriteThroughEngine::WriteCacheCopy(WriteOp* op) {
  const uint64_t piece = c_.cache_io->piece_bytes();
  for (uint64_t off = 0; off < op->req.len; off += piece) {
    uint64_t n = std::min(piece, op->req.len - off);
    Extent e;
    if (!c_.cache_io->AllocatePiece(op->req.offset + off, n, false, &e)) {
      op->cache_ok = false;
      break;
    }
    op->extents.push_back(e);
    op->pending++;
    c_.cache_io->WriteCache(e, static_cast<uint8_t*>(op->req.buf) + off,
                            [this, op](bool ok) mutable {
                              if (!ok) op->cache_ok = false;
                              if (--op->pending == 0) Complete(op);
                            });
  }
}

void WriteThroughEngine::Complete(WriteOp* op) {
  // The index without waiting on this reactor (index_call.h), then the ack.
  CallIndex(c_.set, [this, op] { return UpdateIndex(op); },
            [this, op](Status st) {
              // A node that could not be read: as a failed insert (UpdateIndex).
              if (!st.ok()) UB_WARN("{}: index update failed: {}", c_.spec, st.ToString());
              Finish(op);
            });
}

Status WriteThroughEngine::UpdateIndex(WriteOp* op) {
  if (op->backing_status.ok() && op->cache_ok && !op->extents.empty()) {
    // Each pass goes on from the extent the last one stopped at.
    for (; op->inserted < op->extents.size(); op->inserted++) {
      // Rule 9: provisional until a backing flush covers it, unless FUA.
      Status ist = c_.durability->InsertClean(op->extents[op->inserted], op->fua);
      if (ist.IsWouldBlock()) return ist;
      if (!ist.ok()) UB_WARN("{}: index insert failed: {}", c_.spec, ist.ToString());
    }
    return Status::OK();
  }
  // Bypassed, failed, or cache copy incomplete: drop whatever may have
  // been cached meanwhile (fills of racing misses included).
  // A failed backing write keeps dirty copies: they are still the data.
  uint64_t more = 0;
  bool still_dirty = false;
  Status ist =
      op->backing_status.ok()
          ? c_.set->index().Invalidate(c_.dev, op->req.offset, op->req.len, &more)
          : c_.set->index().InvalidateClean(c_.dev, op->req.offset, op->req.len, &still_dirty);
  if (ist.IsWouldBlock()) return ist;
  if (!ist.ok()) UB_WARN("{}: index invalidate failed: {}", c_.spec, ist.ToString());
  if (more) op->commit = c_.set->persistent();
  return Status::OK();
}

void WriteThroughEngine::Finish(WriteOp* op) {
  c_.durability->WriteSettled(op->req.offset, op->req.len);  // after the insert or invalidate
  if (op->has_dirty) c_.ranges->ReleaseForeground(op->req.offset, op->req.offset + op->req.len);
  // After the insert: a bucket reclaimed before it would turn the new
  // extent stale at once (rule 1).
  c_.cache_io->ReleaseBuckets(op->extents);
  IoDone d = std::move(op->done);
  Status result = std::move(op->backing_status);
  bool commit = op->commit;
  delete op;
  c_.cache_io->AckAfterCommit(std::move(d), std::move(result), commit);
}

}  // namespace ubcache
