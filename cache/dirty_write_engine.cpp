// SPDX-License-Identifier: Apache-2.0
#include "cache/dirty_write_engine.h"

#include <vector>

#include "cache/cache_io.h"
#include "cache/cache_set.h"
#include "cache/device_activity.h"
#include "cache/dirty_handshake.h"
#include "cache/epoch_clock.h"
#include "cache/index_call.h"
#include "cache/ordered_gate.h"
#include "cache/writeback.h"
#include "cache/writethrough_engine.h"
#include "util/clock.h"
#include "util/log.h"

namespace ubcache {

struct DirtyWriteEngine::DirtyOp {
  IoRequest req;
  IoDone done;
  int pending = 1;
  bool ok = true;
  bool has_dirty = false;
  std::vector<Extent> extents;
  size_t inserted = 0;  // of extents, by InsertDirty's passes so far
  Status result;        // the first failed insert's
};

bool DirtyWriteEngine::Accepts(const IoRequest& req, bool overlaps_dirty, bool bypass,
                               Writeback* wb) {
  CacheKnobs& k = c_.set->knobs();
  unsigned in_use = c_.set->in_use_percent();
  if (Full(in_use)) return WriteThroughAtCutoff(wb);
  // A write over dirty data never bypasses: the dirty copy would otherwise
  // be the newer one in the index while the backing device got the write.
  if (overlaps_dirty) return true;
  // writeback_order flush: a bypassed write would reach the backing device
  // ahead of older epochs still in the cache (rule 14); while the set holds
  // dirty data it is absorbed instead, like any other write.
  if (bypass && (!c_.ordered->ordered() || c_.set->buckets().dirty_buckets() == 0))
    return false;
  // Sync writes (FUA, or right after a FLUSH): up to the sync cutoff.
  if (req.flags & (kIoFua | kIoAfterFlush)) return true;
  if (in_use <= k.cutoff_writeback.load(std::memory_order_relaxed)) return true;
  // writeback_order flush: turned away here, the write would wait for every
  // older epoch to be written back first (rule 14, cache/ordered_gate.h):
  // absorbed instead, up to the sync cutoff, with writeback at full speed.
  if (c_.ordered->ordered() && c_.set->buckets().dirty_buckets() > 0) {
    if (wb && !c_.activity->TurnedAway(NowNanos())) wb->Kick();
    return true;
  }
  return WriteThroughAtCutoff(wb);
}

bool DirtyWriteEngine::TakesWithoutLookup(const IoRequest& req, bool bypass) const {
  // Accepts' tests, up to the first whose answer needs overlaps_dirty or acts.
  if (bypass) return false;
  unsigned in_use = c_.set->in_use_percent();
  if (Full(in_use)) return false;
  if (req.flags & (kIoFua | kIoAfterFlush)) return true;
  return in_use <= c_.set->knobs().cutoff_writeback.load(std::memory_order_relaxed);
}

bool DirtyWriteEngine::Full(unsigned in_use) const {
  // The dirty epochs' state must fit the checkpoint (ExtentIndex::
  // epoch_state_full): past its budget no dirty write is taken, as past the
  // sync cutoff; in flush order it waits for writeback to retire epochs.
  return in_use > c_.set->knobs().cutoff_writeback_sync.load(std::memory_order_relaxed) ||
         c_.set->index().epoch_state_full();
}

bool DirtyWriteEngine::WriteThroughAtCutoff(Writeback* wb) {
  // Dirty data fills the cache to the cutoff: this write goes to the
  // spindle in the foreground, one random write at a time. The dirty data
  // in its way leaves faster as sorted writeback than it could at the PI
  // controller's rate, so the writeback thread runs at full speed while
  // writes are being turned away (Writeback::Pass), and wakes from its
  // writeback_delay sleep now.
  cutoff_writethroughs_.fetch_add(1, std::memory_order_relaxed);
  bool recently = c_.activity->TurnedAway(NowNanos());
  if (wb && !recently) wb->Kick();
  return false;
}

bool DirtyWriteEngine::Write(const IoRequest& req, IoDone& done, bool has_dirty, Writeback* wb) {
  // Rule 7: `dirty` is durable on the backing device before the first
  // dirty write is acknowledged. If it is not yet, the writeback thread
  // writes it and this write starts again (through, if that failed).
  if (!handshake_->Enter([&]() -> Callback<void(bool)> {
        return [this, r = req, d = std::move(done)](bool refused) mutable {
          rewrite_(r, std::move(d), refused);
        };
      })) {
    wb->Kick();
    return true;
  }
  auto* op = new DirtyOp();
  op->req = req;
  op->has_dirty = has_dirty;
  const uint64_t piece = c_.cache_io->piece_bytes();
  for (uint64_t off = 0; off < req.len; off += piece) {
    Extent e;
    bool wait = false;
    if (!c_.cache_io->AllocatePiece(req.offset + off, std::min(piece, req.len - off), true, &e,
                                    &wait)) {
      c_.cache_io->ReleaseBuckets(op->extents);
      delete op;
      handshake_->Leave();
      // The cache is full of what it cannot drop: write through instead
      // (never an error for the client, never a wait without bound).
      if (!wait) return false;
      // No bucket ready on this serving reactor: the write parks, and starts
      // again once the refill thread has journaled reclaimed buckets (through,
      // if there is still none).
      ParkForSpace(req, done);
      return true;
    }
    op->extents.push_back(e);
  }
  op->done = std::move(done);
  for (const Extent& e : op->extents) {
    op->pending++;
    c_.cache_io->WriteCache(e, static_cast<uint8_t*>(req.buf) + (e.start - req.offset),
                            [this, op](bool ok) {
                              if (!ok) op->ok = false;
                              if (--op->pending == 0) Complete(op);
                            });
  }
  if (--op->pending == 0) Complete(op);
  return true;
}

void DirtyWriteEngine::ParkForSpace(const IoRequest& req, IoDone& done) {
  Callback<void(bool)> retry = [this, r = req, d = std::move(done)](bool space) mutable {
    rewrite_(r, std::move(d), !space);
  };
  if (c_.set->buckets().ParkForSpace(std::move(retry))) return;
  // A bucket came free meanwhile: start again at once (not from this stack).
  Reactor::Current()->Defer([retry = std::move(retry)]() mutable { retry(true); });
}

void DirtyWriteEngine::Complete(DirtyOp* op) {
  if (!op->ok) {
    op->result = Status::IoError("cache device write failed");
    Finish(op);
    return;
  }
  // The index without waiting on this reactor (index_call.h).
  CallIndex(c_.set, [this, op] { return InsertDirty(op); },
            [this, op](Status st) {
              if (!st.ok() && op->result.ok()) op->result = std::move(st);
              // Rule 11: a FUA write is the last write of its epoch (once
              // all its pieces are in, whichever passes it took).
              if (op->req.flags & kIoFua) c_.epoch->Close();
              Finish(op);
            });
}

Status DirtyWriteEngine::InsertDirty(DirtyOp* op) {
  // The data is on the cache device: insert it dirty, checked (with its
  // data's hash), so that the soft commit below may carry it. Each pass
  // goes on from the extent the last one stopped at. Each piece takes the
  // device's current write epoch; in flush order an older epoch's version
  // it replaces stays kept until writeback has written that epoch (rule 12).
  EpochRule rule{.epoch = c_.epoch,
                 .keep_older = c_.ordered->ordered()};
  // The clock is read before any insert takes an epoch, and the epochs it
  // may have taken are stamped after, before the ack (epoch_clock.h).
  const uint64_t t_ms = UnixMillis();
  const uint64_t first = c_.epoch->current();
  Status st = Status::OK();
  for (; op->inserted < op->extents.size(); op->inserted++) {
    const Extent& e = op->extents[op->inserted];
    const uint8_t* data = static_cast<const uint8_t*>(op->req.buf) + (e.start - op->req.offset);
    Status ist = c_.set->index().Insert(e, data, /*provisional=*/false, &rule);
    if (ist.IsWouldBlock()) {
      st = ist;
      break;
    }
    if (!ist.ok() && op->result.ok()) op->result = ist;
  }
  const uint64_t last = c_.epoch->current();
  if (!c_.clock->Stamped(last)) c_.clock->Stamp(first, last, t_ms);
  return st;
}

void DirtyWriteEngine::Finish(DirtyOp* op) {
  Status result = std::move(op->result);
  // On failure the write goes through below, whose own insert (or
  // invalidation, once the backing device has the data) fixes the range.
  // Only now may the buckets be reclaimed: until the insert their dirty
  // bytes are not counted, and a reclaim in between would bump the gen
  // under the new extent (which would then read as stale: lost data).
  c_.cache_io->ReleaseBuckets(op->extents);
  handshake_->Leave();
  IoRequest req = op->req;
  IoDone d = std::move(op->done);
  bool has_dirty = op->has_dirty;
  delete op;
  if (!result.ok()) {
    // The cache could not take it: the backing device still can.
    UB_WARN("{}: writeback write failed ({}); writing through", c_.spec, result.ToString());
    through_->Write(req, std::move(d), !has_dirty, has_dirty);
    return;
  }
  // Acknowledged once its journal entry is written: FUA, durably (its data
  // and the entry that finds it); otherwise soft — the entry survives a
  // crash of the daemon at once (so kill -9, or a ublk recovery, never
  // reverts an acknowledged write) and a power cut from the next hard
  // commit, within journal_delay_ms or at the next FLUSH.
  c_.set->CommitAsync(std::move(d), !(req.flags & kIoFua));
}

}  // namespace ubcache
