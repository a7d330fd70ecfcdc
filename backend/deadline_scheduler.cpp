// SPDX-License-Identifier: Apache-2.0
#include "backend/deadline_scheduler.h"

#include <algorithm>
#include <vector>

#include "util/clock.h"
#include "util/thread_annotations.h"

namespace ubcache {

namespace {

// A request held by the scheduler, from DoSubmit() until its completion is
// delivered.
struct Pending {
  IoRequest req;
  IoDone done;
  Reactor* origin;  // where `done` must run
  uint64_t arrival_ns;
};

using Queue = std::vector<std::unique_ptr<Pending>>;  // arrival order

}  // namespace

struct DeadlineScheduler::State : std::enable_shared_from_this<State> {
  State(std::unique_ptr<BlockDevice> l, Options o) : lower(std::move(l)), opts(o) {}

  // Submits to the device below every request the rules allow now; arms a
  // wake-up when held writes may go later. Any reactor thread, lock not held.
  void Dispatch() EXCLUDES(mu);
  // The next request to dispatch, or null; *wake is set when writes are
  // held and no completion will come to look at them again.
  std::unique_ptr<Pending> PickLocked(uint64_t now, uint64_t* wake) REQUIRES(mu);
  // Takes the next request of `q` by the elevator, or its oldest if that one
  // has waited `expire`.
  std::unique_ptr<Pending> TakeLocked(Queue* q, uint64_t now, uint64_t expire) REQUIRES(mu);
  std::unique_ptr<Pending> StartWriteBatchLocked(uint64_t now) REQUIRES(mu);
  void Finish(std::unique_ptr<Pending> p, Status st) EXCLUDES(mu);

  const std::unique_ptr<BlockDevice> lower;
  const Options opts;

  mutable Mutex mu;
  Queue reads GUARDED_BY(mu);
  Queue writes GUARDED_BY(mu);  // writes, discards, write-zeroes
  unsigned inflight GUARDED_BY(mu) = 0;
  unsigned reads_inflight GUARDED_BY(mu) = 0;
  uint64_t head GUARDED_BY(mu) = 0;  // end of the last request dispatched
  unsigned batch_left GUARDED_BY(mu) = 0;
  uint64_t last_read_done_ns GUARDED_BY(mu) = 0;
  uint64_t last_write_ns GUARDED_BY(mu) = 0;  // when a write was last dispatched
  bool holding GUARDED_BY(mu) = false;        // writes held for a read (rule 3)
  uint64_t wake_at GUARDED_BY(mu) = 0;        // a wake-up timer is armed for then
  Stats stats GUARDED_BY(mu);
};

std::unique_ptr<Pending> DeadlineScheduler::State::TakeLocked(Queue* q, uint64_t now,
                                                              uint64_t expire) {
  size_t pick = 0;
  if (now - q->front()->arrival_ns < expire) {
    // One-way elevator: the lowest offset at or after the head, else wrap
    // to the lowest of all.
    size_t ahead = q->size(), lowest = 0;
    for (size_t i = 0; i < q->size(); i++) {
      uint64_t off = (*q)[i]->req.offset;
      if (off < (*q)[lowest]->req.offset) lowest = i;
      if (off >= head && (ahead == q->size() || off < (*q)[ahead]->req.offset)) ahead = i;
    }
    pick = ahead < q->size() ? ahead : lowest;
  }
  std::unique_ptr<Pending> p = std::move((*q)[pick]);
  q->erase(q->begin() + static_cast<ptrdiff_t>(pick));
  head = p->req.offset + p->req.len;
  inflight++;
  if (p->req.op == IoOp::kRead) {
    reads_inflight++;
    stats.reads++;
  } else {
    last_write_ns = now;
    holding = false;
    stats.writes++;
  }
  return p;
}

std::unique_ptr<Pending> DeadlineScheduler::State::StartWriteBatchLocked(uint64_t now) {
  size_t batch = std::clamp<size_t>(writes.size() / 4, std::max(opts.write_batch, 1u),
                                   std::max(opts.max_write_batch, opts.write_batch));
  batch_left = static_cast<unsigned>(batch - 1);
  stats.write_batches++;
  return TakeLocked(&writes, now, opts.write_expire_ns);
}

std::unique_ptr<Pending> DeadlineScheduler::State::PickLocked(uint64_t now, uint64_t* wake) {
  *wake = 0;
  if (inflight >= opts.depth) return nullptr;
  if (writes.empty()) batch_left = 0;
  // Rule 1: a started write batch continues.
  if (batch_left > 0) {
    batch_left--;
    return TakeLocked(&writes, now, opts.write_expire_ns);
  }
  // Rule 4: the writes' turn comes once per write_expire while reads are busy.
  uint64_t write_turn =
      writes.empty() ? 0 : std::max(last_write_ns, writes.front()->arrival_ns) + opts.write_expire_ns;
  // Rule 2: reads first.
  if (!reads.empty()) {
    if (!writes.empty() && now >= write_turn) return StartWriteBatchLocked(now);
    return TakeLocked(&reads, now, opts.read_expire_ns);
  }
  if (writes.empty()) return nullptr;
  // Rule 3: hold the writes while a read is at the device or just finished.
  uint64_t anticipate_until = last_read_done_ns + opts.anticipate_ns;
  if (reads_inflight > 0 || (last_read_done_ns > 0 && now < anticipate_until)) {
    if (now >= write_turn) return StartWriteBatchLocked(now);
    if (!holding) {
      holding = true;
      stats.anticipation_waits++;
    }
    // A read at the device comes back through Finish(); else wake when the
    // anticipation or the writes' wait ends, whichever is first.
    if (reads_inflight == 0) *wake = std::min(anticipate_until, write_turn);
    return nullptr;
  }
  return TakeLocked(&writes, now, opts.write_expire_ns);
}

void DeadlineScheduler::State::Dispatch() {
  for (;;) {
    std::unique_ptr<Pending> p;
    uint64_t wake = 0;
    Reactor* timer = nullptr;  // where the wake-up is armed, when one is
    {
      MutexLock l(&mu);
      uint64_t now = NowNanos();
      p = PickLocked(now, &wake);
      if (!p && wake > 0 && (wake_at <= now || wake < wake_at)) {
        wake_at = wake;
        // On the reactor of a held write, not on this one: the current
        // reactor may be a client's that is about to exit (its last read
        // just finished), taking the timer with it and leaving the writes
        // held for good. A held write's reactor waits for its completion,
        // so it runs until then.
        timer = writes.front()->origin;
      }
    }
    if (!p) {
      if (timer) {
        auto arm = [w = weak_from_this(), wake] {
          Reactor::Current()->RunAt(wake, [w] {
            if (std::shared_ptr<State> s = w.lock()) s->Dispatch();
          });
        };
        if (timer == Reactor::Current()) {
          arm();
        } else {
          timer->Post(std::move(arm));
        }
      }
      return;
    }
    // Submitted to the device below on the request's own reactor, never on
    // the one running this Dispatch: the device completes a request on the
    // reactor that submitted it, and a completion on another reactor's ring
    // (or a spindle model's timer there) waits until that reactor runs
    // again. Dispatch often runs in the completion of someone else's
    // request — the writeback thread's, whose reactor then sleeps until its
    // next pass — and a client write left on that ring held its range from
    // writeback, which in flush order kept the next pass from ever running
    // the ring: a hang with every thread idle (120-writeback-crash). The
    // origin waits for its completion, so it runs (as for the timer above).
    Pending* raw = p.release();
    Callback<void()> submit = [self = shared_from_this(), raw] {
      self->lower->Submit(raw->req, [self, raw](Status st) {
        self->Finish(std::unique_ptr<Pending>(raw), std::move(st));
      });
    };
    if (raw->origin == Reactor::Current()) {
      submit();
    } else {
      raw->origin->Post(std::move(submit));
    }
  }
}

void DeadlineScheduler::State::Finish(std::unique_ptr<Pending> p, Status st) {
  {
    MutexLock l(&mu);
    inflight--;
    if (p->req.op == IoOp::kRead) {
      reads_inflight--;
      last_read_done_ns = NowNanos();
    }
  }
  // The device gets its next request before the submitter hears of this one.
  Dispatch();
  if (p->origin == Reactor::Current()) {
    p->done(std::move(st));
  } else {
    p->origin->Post([done = std::move(p->done), st = std::move(st)]() mutable { done(std::move(st)); });
  }
}

DeadlineScheduler::DeadlineScheduler(std::unique_ptr<BlockDevice> lower, Options opts)
    : BlockDevice(lower->spec(), lower->size(), lower->logical_block_size(), lower->read_only()),
      opts_(opts) {
  if (opts_.depth == 0) opts_.depth = 1;
  state_ = std::make_shared<State>(std::move(lower), opts_);
}

DeadlineScheduler::~DeadlineScheduler() = default;

std::string DeadlineScheduler::Describe() const {
  return state_->lower->Describe() + ", deadline scheduler (depth " + std::to_string(opts_.depth) +
         ")";
}

bool DeadlineScheduler::rotational() const { return state_->lower->rotational(); }

Result<uint64_t> DeadlineScheduler::Grow() {
  UB_ASSIGN_OR_RETURN(uint64_t lower, state_->lower->Grow());
  UB_RETURN_IF_ERROR(SetGrownSize(lower));
  return lower;
}

DeadlineScheduler::Stats DeadlineScheduler::stats() const {
  MutexLock l(&state_->mu);
  Stats s = state_->stats;
  s.queued = state_->reads.size() + state_->writes.size();
  return s;
}

void DeadlineScheduler::DoSubmit(const IoRequest& req, IoDone done) {
  if (req.op == IoOp::kFlush) {
    state_->lower->Submit(req, std::move(done));
    return;
  }
  auto p = std::make_unique<Pending>(Pending{req, std::move(done), Reactor::Current(), NowNanos()});
  {
    MutexLock l(&state_->mu);
    (req.op == IoOp::kRead ? state_->reads : state_->writes).push_back(std::move(p));
  }
  state_->Dispatch();
}

void DeadlineScheduler::DoPrefetch(uint64_t offset, uint64_t len, IoDone done) {
  state_->lower->Prefetch(offset, len, std::move(done));
}

Result<std::unique_ptr<BlockDevice>> WithScheduler(std::unique_ptr<BlockDevice> dev,
                                                   std::string_view mode) {
  if (mode == "none" || (mode == "auto" && !dev->rotational())) return dev;
  if (mode == "auto" || mode == "deadline")
    return std::unique_ptr<BlockDevice>(std::make_unique<DeadlineScheduler>(std::move(dev)));
  return Status::InvalidArgument("bad scheduler '" + std::string(mode) +
                                 "': expected auto, deadline or none");
}

}  // namespace ubcache
