// SPDX-License-Identifier: Apache-2.0
#include "cache/discard_engine.h"

#include "cache/cache_io.h"
#include "cache/cache_set.h"
#include "cache/flush_engine.h"
#include "cache/range_guard.h"
#include "util/log.h"

namespace ubcache {

void DiscardEngine::Discard(const IoRequest& req, IoDone done) {
  bool has_dirty = false;
  uint64_t dropped = 0;
  Status st = c_.set->index().InvalidateClean(c_.dev, req.offset, req.len, &has_dirty, &dropped);
  if (!st.ok()) {
    Reactor::Current()->DeferDone(std::move(done), st);
    return;
  }
  auto issue = [this, req, has_dirty, done = std::move(done)]() mutable {
    IoRequest down = req;
    // Over dirty data, durable below before the commit that drops it.
    if (has_dirty && req.op == IoOp::kWriteZeroes) down.flags |= kIoFua;
    c_.backing->Submit(down, [this, req, has_dirty, done = std::move(done)](Status st2) mutable {
      flush_->BackingWriteDone();
      if (st2.ok() && has_dirty && req.op == IoOp::kDiscard) {
        // A discard has no FUA: flush it down first.
        c_.backing->Flush([this, req, has_dirty, done = std::move(done)](Status st3) mutable {
          Complete(req, has_dirty, std::move(st3), std::move(done));
        });
        return;
      }
      Complete(req, has_dirty, std::move(st2), std::move(done));
    });
  };
  // As for a write (WriteThroughEngine): the range's clean copies leave the
  // journal before the backing device discards under them.
  c_.ranges->BeforeBackingWrite(req.offset, req.len, has_dirty, dropped > 0, std::move(issue));
}

void DiscardEngine::Complete(const IoRequest& req, bool has_dirty, Status st, IoDone done) {
  // Dirty copies go only once the backing device has the discard (a failed
  // discard keeps them: they are still the data).
  uint64_t more = 0;
  bool still = false;
  Status ist = st.ok() ? c_.set->index().Invalidate(c_.dev, req.offset, req.len, &more)
                       : c_.set->index().InvalidateClean(c_.dev, req.offset, req.len, &still);
  if (!ist.ok()) UB_WARN("{}: index invalidate failed: {}", c_.spec, ist.ToString());
  if (has_dirty) c_.ranges->ReleaseForeground(req.offset, req.offset + req.len);
  // Discarding dirty data: the invalidation is durable before the ack, so
  // no replay brings the old copy back over the discarded range.
  c_.cache_io->AckAfterCommit(std::move(done), std::move(st),
                              c_.set->persistent() && (has_dirty || more > 0));
}

}  // namespace ubcache
