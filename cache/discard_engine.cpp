// SPDX-License-Identifier: Apache-2.0
#include "cache/discard_engine.h"

#include <memory>

#include "cache/backing_durability.h"
#include "cache/cache_io.h"
#include "cache/cache_set.h"
#include "cache/index_call.h"
#include "cache/ordered_gate.h"
#include "cache/range_guard.h"
#include "util/log.h"

namespace ubcache {

void DiscardEngine::Discard(const IoRequest& req, IoDone done) {
  struct Dropped {
    bool has_dirty = false;
    uint64_t bytes = 0;
  };
  auto dropped = std::make_shared<Dropped>();
  // The index without waiting on this reactor (index_call.h).
  CallIndex(
      c_.set,
      [this, req, dropped] {
        return c_.set->index().InvalidateClean(c_.dev, req.offset, req.len, &dropped->has_dirty,
                                               &dropped->bytes);
      },
      [this, req, dropped, done = std::move(done)](Status st) mutable {
        if (!st.ok()) {
          Reactor::Current()->DeferDone(std::move(done), st);
          return;
        }
        // Not ahead of older epochs still dirty in the cache (rule 14).
        c_.ordered->Enter([this, req, dropped, done = std::move(done)](OrderedGate::Verdict v) mutable {
          if (v != OrderedGate::Verdict::kGo) {
            Reactor::Current()->DeferDone(std::move(done), Status::IoError(c_.spec + ": fenced while waiting for writeback"));
            return;
          }
          Issue(req, dropped->has_dirty, dropped->bytes > 0, std::move(done));
        });
      });
}

void DiscardEngine::Issue(const IoRequest& req, bool has_dirty, bool dropped_clean, IoDone done) {
  auto issue = [this, req, has_dirty, done = std::move(done)]() mutable {
    IoRequest down = req;
    // Over dirty data, durable below before the commit that drops it.
    if (has_dirty && req.op == IoOp::kWriteZeroes) down.flags |= kIoFua;
    c_.durability->WriteIssuing(req.offset, req.len);  // rule 9: fills may read it from now on
    c_.backing->Submit(down, [this, req, has_dirty, done = std::move(done)](Status st2) mutable {
      c_.durability->WriteDone();  // rule 8
      if (st2.ok() && has_dirty && req.op == IoOp::kDiscard) {
        // A discard has no FUA: flush it down first.
        c_.durability->Flush([this, req, has_dirty, done = std::move(done)](Status st3) mutable {
          Complete(req, has_dirty, std::move(st3), std::move(done));
        });
        return;
      }
      Complete(req, has_dirty, std::move(st2), std::move(done));
    });
  };
  // As for a write (WriteThroughEngine): the range's clean copies leave the
  // journal before the backing device discards under them.
  c_.ranges->BeforeBackingWrite(req.offset, req.len, has_dirty, dropped_clean, std::move(issue));
}

void DiscardEngine::Complete(const IoRequest& req, bool has_dirty, Status st, IoDone done) {
  // Dirty copies go only once the backing device has the discard (a failed
  // discard keeps them: they are still the data).
  auto more = std::make_shared<uint64_t>(0);
  bool backing_ok = st.ok();
  CallIndex(
      c_.set,
      [this, req, more, backing_ok] {
        bool still = false;
        return backing_ok ? c_.set->index().Invalidate(c_.dev, req.offset, req.len, more.get())
                          : c_.set->index().InvalidateClean(c_.dev, req.offset, req.len, &still);
      },
      [this, req, has_dirty, more, st = std::move(st), done = std::move(done)](Status ist) mutable {
        if (!ist.ok()) UB_WARN("{}: index invalidate failed: {}", c_.spec, ist.ToString());
        c_.durability->WriteSettled(req.offset, req.len);  // after the invalidate
        if (has_dirty) c_.ranges->ReleaseForeground(req.offset, req.offset + req.len);
        // Discarding dirty data: the invalidation is durable before the ack,
        // so no replay brings the old copy back over the discarded range.
        c_.cache_io->AckAfterCommit(std::move(done), std::move(st),
                                    c_.set->persistent() && (has_dirty || *more > 0));
      });
}

}  // namespace ubcache
