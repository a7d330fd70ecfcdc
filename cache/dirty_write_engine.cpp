// SPDX-License-Identifier: Apache-2.0
#include "cache/dirty_write_engine.h"

#include <vector>

#include "cache/cache_io.h"
#include "cache/cache_set.h"
#include "cache/device_activity.h"
#include "cache/dirty_handshake.h"
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
  bool dropped_clean = false;
  std::vector<Extent> extents;
};

bool DirtyWriteEngine::Accepts(const IoRequest& req, bool overlaps_dirty, bool bypass,
                               Writeback* wb) {
  CacheKnobs& k = c_.set->knobs();
  unsigned in_use = c_.set->in_use_percent();
  if (in_use > k.cutoff_writeback_sync.load(std::memory_order_relaxed))
    return WriteThroughAtCutoff(wb);
  // A write over dirty data never bypasses: the dirty copy would otherwise
  // be the newer one in the index while the backing device got the write.
  if (overlaps_dirty) return true;
  if (bypass) return false;
  if (req.flags & kIoFua) return true;  // sync writes: up to the sync cutoff
  return in_use <= k.cutoff_writeback.load(std::memory_order_relaxed) || WriteThroughAtCutoff(wb);
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

bool DirtyWriteEngine::Write(const IoRequest& req, IoDone& done, bool has_dirty, bool dropped_clean,
                             Writeback* wb) {
  // Rule 7: `dirty` is durable on the backing device before the first
  // dirty write is acknowledged. If it is not yet, the writeback thread
  // writes it and this write starts again (through, if that failed).
  if (!handshake_->Enter([&]() -> Callback<void(bool)> {
        return [this, r = req, d = std::move(done), dropped_clean](bool refused) mutable {
          rewrite_(r, std::move(d), dropped_clean, refused);
        };
      })) {
    wb->Kick();
    return true;
  }
  auto* op = new DirtyOp();
  op->req = req;
  op->has_dirty = has_dirty;
  op->dropped_clean = dropped_clean;
  const uint64_t piece = c_.cache_io->piece_bytes();
  for (uint64_t off = 0; off < req.len; off += piece) {
    Extent e;
    if (!c_.cache_io->AllocatePiece(req.offset + off, std::min(piece, req.len - off), true, &e)) {
      // The cache is full of what it cannot drop: write through instead
      // (never an error for the client, never a wait without bound).
      c_.cache_io->ReleaseBuckets(op->extents);
      delete op;
      handshake_->Leave();
      return false;
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

void DirtyWriteEngine::Complete(DirtyOp* op) {
  Status result;
  if (op->ok) {
    // The data is on the cache device: insert it dirty, checked (with its
    // data's hash), so that the soft commit below may carry it.
    for (const Extent& e : op->extents) {
      const uint8_t* data = static_cast<const uint8_t*>(op->req.buf) + (e.start - op->req.offset);
      Status ist = c_.set->index().Insert(e, data);
      if (!ist.ok() && result.ok()) result = ist;
    }
  } else {
    result = Status::IoError("cache device write failed");
  }
  // On failure the write goes through below, whose own insert (or
  // invalidation, once the backing device has the data) fixes the range.
  // Only now may the buckets be reclaimed: until the insert their dirty
  // bytes are not counted, and a reclaim in between would bump the gen
  // under the new extent (which would then read as stale: lost data).
  c_.cache_io->ReleaseBuckets(op->extents);
  handshake_->Leave();
  IoRequest req = op->req;
  IoDone d = std::move(op->done);
  bool has_dirty = op->has_dirty, dropped_clean = op->dropped_clean;
  delete op;
  if (!result.ok()) {
    // The cache could not take it: the backing device still can.
    UB_WARN("{}: writeback write failed ({}); writing through", c_.spec, result.ToString());
    through_->Write(req, std::move(d), !has_dirty, has_dirty, dropped_clean);
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
