// SPDX-License-Identifier: Apache-2.0
#include "cache/read_engine.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "cache/backing_durability.h"
#include "cache/bypass_policy.h"
#include "cache/cache_io.h"
#include "cache/cache_set.h"
#include "cache/device_activity.h"
#include "cache/index_call.h"
#include "cache/recycled.h"
#include "cache/request_timing.h"
#include "cache/stats.h"
#include "util/buffer_pool.h"
#include "util/clock.h"
#include "util/log.h"

namespace ubcache {

struct ReadEngine::ReadOp {
  IoRequest req;
  IoDone done;
  bool bypass = false;
  bool around_cache = false;  // clean hits too are read from the backing device
  bool prefetch = false;      // counted as a readahead, not a hit or miss
  bool all_hit = true;
  uint64_t since = 0;
  // When a client read entered (DoSubmit's clock reading), for RequestStats;
  // 0: not recorded here (a prefetch step, or a read whose done records it).
  uint64_t start_ns = 0;
  int pending = 1;  // pieces in flight, plus one until all are issued
  Status status;
};

struct ReadEngine::HitRun {
  static constexpr unsigned kMaxExtents = 8;
  ReadOp* op = nullptr;
  Extent ext[kMaxExtents];
  unsigned n = 0;
  uint64_t t0 = 0;
  uint64_t len() const { return ext[n - 1].end() - ext[0].start; }
};

bool ReadEngine::Extends(const HitRun& run, const Extent& e) {
  const Extent& last = run.ext[run.n - 1];
  return run.n < HitRun::kMaxExtents && e.start == last.end() && e.cache_offset == last.cache_offset + last.len;
}

void ReadEngine::PieceDone(ReadOp* op, Status st, uint64_t now_ns) {
  if (!st.ok() && op->status.ok()) op->status = std::move(st);
  if (--op->pending > 0) return;
  if (op->start_ns) {
    if (now_ns == 0) now_ns = NowNanos();
    c_.requests->Record(Reactor::Current()->id(), RequestStats::kRead, op->req.len,
                        now_ns - op->start_ns, op->status.ok());
  }
  if (op->status.ok() && op->prefetch) {
    c_.stats->CountReadahead();
  } else if (op->status.ok()) {
    if (op->all_hit)
      c_.stats->CountHit(op->bypass);
    else
      c_.stats->CountMiss(op->bypass);
    if (op->bypass) c_.stats->CountBypassed(op->req.len);
  }
  IoDone done = std::move(op->done);
  Status result = std::move(op->status);
  Recycled<ReadOp>::Recycle(op);
  done(std::move(result));
}

void ReadEngine::ReadBacking(ReadOp* op, uint64_t start, uint64_t len, bool was_hit) {
  op->pending++;
  uint8_t* dst = static_cast<uint8_t*>(op->req.buf) + (start - op->req.offset);
  bool fill = !op->bypass && !was_hit;
  uint64_t t0 = NowNanos();
  c_.activity->BackingRead(t0);
  c_.backing->Read(start, len, dst, [this, op, start, len, dst, fill, t0](Status st) {
    uint64_t now = NowNanos();
    if (st.ok()) c_.backing_time->Observe(ServiceTime::Op::kRead, len, now - t0, now);
    // Fill after the client has its data: copy now, the buffer is theirs.
    if (st.ok() && fill) Fill(start, len, dst, op->since);
    PieceDone(op, std::move(st), fill ? 0 : now);  // the client waited for the fill's copy too
  });
}

void ReadEngine::Prefetch(uint64_t offset, uint64_t len, IoDone done) {
  struct Prefetch {
    ReadEngine* d;
    uint64_t next, end;
    IoDone done;
    uint8_t* buf;
    size_t cap;
    void Step() {
      if (next >= end) {
        BufferPool::ForThread().Put(buf, cap);
        IoDone cb = std::move(done);
        delete this;
        cb(Status::OK());
        return;
      }
      uint64_t n = std::min<uint64_t>(end - next, cap);
      IoRequest r{IoOp::kRead, 0, next, n, buf};
      next += n;
      d->Read(
          r,
          [this](Status st) {
            if (!st.ok()) next = end;  // a hint: stop quietly, the client's reads will retry
            Step();
          },
          true);
    }
  };
  size_t cap = 0;
  uint8_t* buf = BufferPool::ForThread().Get(1 << 20, &cap);
  (new Prefetch{this, offset, offset + len, std::move(done), buf, cap})->Step();
}

void ReadEngine::Read(const IoRequest& req, IoDone done, bool prefetch, uint64_t start_ns) {
  if (c_.set->failed()) {
    if (start_ns)
      done = TimeRequest(c_.requests, RequestStats::kRead, req.len, start_ns, std::move(done));
    ReadFailedCache(req, std::move(done));
    return;
  }
  ReadOp* op = Recycled<ReadOp>::New();
  op->req = req;
  op->done = std::move(done);
  op->prefetch = prefetch;
  op->start_ns = start_ns;
  op->bypass = prefetch
                   ? c_.set->knobs().cache_mode.load(std::memory_order_relaxed) == CacheMode::kNone
                   : bypass_->ShouldBypass(req, false, &op->around_cache);
  // The sequence is taken before the lookup: any write from here on makes a
  // fill of what we read from the backing device a collision.
  op->since = c_.set->index().Sequence(c_.dev, req.offset, req.len);
  LookupAndIssue(op, Status::OK());
}

void ReadEngine::LookupAndIssue(ReadOp* op, Status loaded) {
  const IoRequest& req = op->req;
  // Reused per thread: the loop below only issues I/O (completions never
  // run inside Submit), so nothing re-enters Read while it is in use.
  thread_local std::vector<Extent> hits;
  Status st = loaded.ok() ? c_.set->index().Lookup(c_.dev, req.offset, req.len, &hits) : loaded;
  if (st.IsWouldBlock() && c_.set->index().HasMissingNode()) {
    // A node of the range is not in memory: read it on this reactor and
    // look up again, never waiting here (ExtentIndex, "Without I/O").
    c_.set->index().LoadMissing([this, op](Status ls) { LookupAndIssue(op, std::move(ls)); });
    return;
  }
  if (!st.ok()) {
    // The index cannot be read: serve the whole request from the backing device.
    UB_WARN("{}: index lookup failed, reading from the backing device: {}", c_.spec, st.ToString());
    hits.clear();
  }
  BucketAllocator& buckets = c_.set->buckets();
  uint64_t cursor = req.offset;
  uint64_t miss_start = req.offset, miss_len = 0;
  auto flush_miss = [&] {
    if (miss_len) ReadBacking(op, miss_start, miss_len, false);
    miss_len = 0;
  };
  HitRun* run = nullptr;
  auto flush_run = [&] {
    if (run) ReadHits(run);
    run = nullptr;
  };
  // A clean hit read around the cache (around_cache) joins the run of
  // backing reads without making the request a miss; nothing in such a
  // request is filled (it bypasses).
  auto add_miss = [&](uint64_t s, uint64_t l, bool hit = false) {
    if (!hit) op->all_hit = false;
    if (miss_len && miss_start + miss_len == s) {
      miss_len += l;
    } else {
      flush_miss();
      miss_start = s;
      miss_len = l;
    }
  };
  for (const Extent& e : hits) {
    if (e.start > cursor) add_miss(cursor, e.start - cursor);
    if (!buckets.Valid(e.cache_offset, e.gen)) {
      add_miss(e.start, e.len);  // stale pointer: the bucket was reused
    } else if (op->around_cache && !e.dirty) {
      // Auto congestion: the backing device is expected to answer sooner,
      // and a clean extent's data is the backing device's. Still a hit (a
      // bypass hit in the stats), and the bucket stays warm.
      buckets.Touch(buckets.BucketOf(e.cache_offset));
      add_miss(e.start, e.len, true);
    } else {
      flush_miss();
      buckets.Touch(buckets.BucketOf(e.cache_offset));
      if (!run || !Extends(*run, e)) {
        flush_run();
        run = Recycled<HitRun>::New();
        run->op = op;
      }
      run->ext[run->n++] = e;
    }
    cursor = e.end();
  }
  if (cursor < req.offset + req.len) add_miss(cursor, req.offset + req.len - cursor);
  flush_run();
  flush_miss();
  PieceDone(op, Status::OK());  // drop the "still issuing" reference
}

void ReadEngine::ReadFailedCache(const IoRequest& req, IoDone done) {
  // A failed cache: the backing device has everything but the dirty
  // ranges, whose only copy is on the failed device — those answer EIO,
  // never the backing device's stale data.
  auto dirty = std::make_shared<bool>(false);
  CallIndex(
      c_.set,
      [this, req, dirty]() -> Status {
        thread_local std::vector<Extent> found;
        Status st = c_.set->index().Lookup(c_.dev, req.offset, req.len, &found);
        *dirty = st.ok() &&
                 std::any_of(found.begin(), found.end(), [](const Extent& e) { return e.dirty; });
        return st;
      },
      [this, req, dirty, done = std::move(done)](Status st) mutable {
        if (!st.ok() || *dirty) {
          Reactor::Current()->DeferDone(
              std::move(done), Status::IoError(c_.spec + ": dirty data on a failed cache device"));
          return;
        }
        c_.backing->Submit(req, std::move(done));
      });
}

void ReadEngine::ReadHits(HitRun* run) {
  ReadOp* op = run->op;
  op->pending++;
  uint8_t* dst = static_cast<uint8_t*>(op->req.buf) + (run->ext[0].start - op->req.offset);
  run->t0 = NowNanos();
  c_.set->cache_dev()->Read(run->ext[0].cache_offset, run->len(), dst, [this, run](Status st) {
    uint64_t now = NowNanos();
    ReadOp* op = run->op;
    c_.set->cache_time().Observe(ServiceTime::Op::kRead, run->len(), now - run->t0, now);
    c_.set->congestion().Observe((now - run->t0) / 1000,
                                 FixedThresholdUs(c_.set->knobs().congested_read_threshold_us.load(
                                     std::memory_order_relaxed)),
                                 now / 1000);
    if (!st.ok()) c_.set->CountIoError(st);
    bool dirty_failed = false, clean_failed = false;
    for (unsigned i = 0; i < run->n; i++) {
      const Extent& ex = run->ext[i];
      // A dirty extent is the only copy: its read error is the client's
      // (never the stale backing data).
      if (!st.ok() && ex.dirty) {
        dirty_failed = true;
        continue;
      }
      // Only cache read errors are recoverable: fall back to the backing
      // device, and if the bucket was reused meanwhile, the same.
      if (!st.ok() || !c_.set->buckets().Valid(ex.cache_offset, ex.gen)) {
        clean_failed |= !st.ok();
        op->all_hit = false;
        ReadBacking(op, ex.start, ex.len, true);
      }
    }
    if (clean_failed) UB_WARN("{}: cache read failed, reading the backing device: {}", c_.spec, st.ToString());
    if (dirty_failed) UB_WARN("{}: cache read of dirty data failed: {}", c_.spec, st.ToString());
    Status failed = dirty_failed ? st : Status::OK();
    Recycled<HitRun>::Recycle(run);
    PieceDone(op, std::move(failed), now);
  });
}

void ReadEngine::Fill(uint64_t start, uint64_t len, const uint8_t* data, uint64_t since) {
  const uint64_t piece = c_.cache_io->piece_bytes();
  for (uint64_t off = 0; off < len; off += piece) {
    uint64_t n = std::min(piece, len - off);
    Extent e;
    if (!c_.cache_io->AllocatePiece(start + off, n, false, &e)) return;  // full: just don't cache
    size_t cap = 0;
    uint8_t* copy = BufferPool::ForThread().Get(n, &cap);
    std::memcpy(copy, data + off, n);
    c_.set->cache_dev()->Write(e.cache_offset, n, copy, 0, [this, e, since, copy, cap](Status st) {
      BufferPool::ForThread().Put(copy, cap);
      if (!st.ok()) {
        c_.set->CountIoError(st);
        c_.set->buckets().WriteDone(c_.set->buckets().BucketOf(e.cache_offset));
        UB_WARN("{}: cache write failed: {}", c_.spec, st.ToString());
        return;
      }
      auto inserted = std::make_shared<bool>(false);
      // Rule 9: provisional while a client write may be only in the backing
      // device's volatile cache (this copy may hold its data).
      CallIndex(
          c_.set, [this, e, since, inserted] { return c_.durability->InsertFill(e, since, inserted.get()); },
          [this, e, inserted](Status ist) {
            c_.set->buckets().WriteDone(c_.set->buckets().BucketOf(e.cache_offset));  // after the insert
            if (!ist.ok())
              UB_WARN("{}: index insert failed: {}", c_.spec, ist.ToString());
            else if (!*inserted)
              c_.stats->CountMissCollision();
          });
    });
  }
}

}  // namespace ubcache
