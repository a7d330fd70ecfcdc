#include "cache/cached_device.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "util/buffer_pool.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/size.h"

namespace ubcache {

namespace {

uint32_t BlockSizeFor(BlockDevice* backing, BlockDevice* cache) {
  return std::max({uint32_t{4096}, backing->logical_block_size(), cache->logical_block_size()});
}

uint64_t UsableSize(BlockDevice* backing, uint32_t block) {
  return backing->size() - backing->size() % block;
}

}  // namespace

struct CachedDevice::ReadOp {
  CachedDevice* d = nullptr;
  IoRequest req;
  IoDone done;
  bool bypass = false;
  bool prefetch = false;  // counted as a readahead, not a hit or miss
  bool all_hit = true;
  uint64_t since = 0;
  int pending = 1;  // pieces in flight, plus one until all are issued
  Status status;

  // A read is begun and ended on one reactor thread (completions run where
  // they were submitted), so each thread recycles its own ops: no malloc per
  // request on the hit path.
  static ReadOp* New() {
    auto& pool = Pool();
    if (pool.empty()) return new ReadOp();
    ReadOp* op = pool.back();
    pool.pop_back();
    return op;
  }
  static void Recycle(ReadOp* op) {
    auto& pool = Pool();
    if (pool.size() >= 1024) {
      delete op;
      return;
    }
    *op = ReadOp();
    pool.push_back(op);
  }

 private:
  struct OwnedPool : std::vector<ReadOp*> {
    ~OwnedPool() {
      for (ReadOp* op : *this) delete op;
    }
  };
  static OwnedPool& Pool() {
    thread_local OwnedPool pool;
    return pool;
  }
};

CachedDevice::CachedDevice(std::string spec, CacheSet* set, uint32_t dev_index,
                           BlockDevice* backing)
    : BlockDevice(std::move(spec), UsableSize(backing, BlockSizeFor(backing, set->cache_dev())),
                  BlockSizeFor(backing, set->cache_dev()), backing->read_only()),
      set_(set),
      dev_(dev_index),
      backing_(backing) {}

std::string CachedDevice::Describe() const {
  return backing_->Describe() + " cached on " + set_->cache_dev()->spec() + " (" +
         CacheModeName(set_->knobs().cache_mode.load()) + ")";
}

bool CachedDevice::ShouldBypass(const IoRequest& req, bool write) {
  CacheKnobs& k = set_->knobs();
  CacheMode mode = k.cache_mode.load(std::memory_order_relaxed);
  if (mode == CacheMode::kNone) return true;
  if (write && mode == CacheMode::kWritearound) return true;
  uint64_t cutoff = k.sequential_cutoff.load(std::memory_order_relaxed);
  uint64_t now = NowNanos();
  uint64_t congested = set_->congestion().CongestedCutoff(
      k.congested_read_threshold_us.load(std::memory_order_relaxed),
      k.congested_write_threshold_us.load(std::memory_order_relaxed), now / 1000);
  if (cutoff == 0 && congested == 0) return false;
  auto& det = detectors_[Reactor::Current()->id()];
  if (!det) det = std::make_unique<SequentialDetector>();
  uint64_t run = det->Observe(dev_, req.offset, req.len, now);
  if (cutoff && run >= cutoff) return true;
  if (congested && run >= congested) return true;
  return false;
}

Status CachedDevice::DropExtents() {
  constexpr uint64_t kStep = 64 << 20;
  for (uint64_t off = 0; off < size(); off += kStep)
    UB_RETURN_IF_ERROR(set_->index().Invalidate(dev_, off, std::min(kStep, size() - off)));
  return Status::OK();
}

Status CachedDevice::Detach() {
  attached_.store(false, std::memory_order_release);
  return DropExtents();
}

Status CachedDevice::Attach() {
  UB_RETURN_IF_ERROR(DropExtents());
  attached_.store(true, std::memory_order_release);
  return Status::OK();
}

void CachedDevice::DoSubmit(const IoRequest& req, IoDone done) {
  if (!attached() && req.op == IoOp::kRead) {
    backing_->Submit(req, std::move(done));  // detached: the index is not ours to read
    return;
  }
  switch (req.op) {
    case IoOp::kRead: DoRead(req, std::move(done)); return;
    case IoOp::kWrite: DoWrite(req, std::move(done)); return;
    case IoOp::kFlush: DoFlush(std::move(done)); return;
    case IoOp::kDiscard:
    case IoOp::kWriteZeroes: DoDiscard(req, std::move(done)); return;
  }
}

// ---- reads ----

void CachedDevice::PieceDone(ReadOp* op, Status st) {
  if (!st.ok() && op->status.ok()) op->status = std::move(st);
  if (--op->pending > 0) return;
  if (op->status.ok() && op->prefetch) {
    stats_.CountReadahead();
  } else if (op->status.ok()) {
    if (op->all_hit)
      stats_.CountHit(op->bypass);
    else
      stats_.CountMiss(op->bypass);
    if (op->bypass) stats_.CountBypassed(op->req.len);
  }
  IoDone done = std::move(op->done);
  Status result = std::move(op->status);
  ReadOp::Recycle(op);
  done(std::move(result));
}

void CachedDevice::ReadBacking(ReadOp* op, uint64_t start, uint64_t len, bool was_hit) {
  op->pending++;
  uint8_t* dst = static_cast<uint8_t*>(op->req.buf) + (start - op->req.offset);
  bool fill = !op->bypass && !was_hit;
  backing_->Read(start, len, dst, [this, op, start, len, dst, fill](Status st) {
    // Fill after the client has its data: copy now, the buffer is theirs.
    if (st.ok() && fill) Fill(start, len, dst, op->since);
    PieceDone(op, std::move(st));
  });
}

void CachedDevice::DoPrefetch(uint64_t offset, uint64_t len, IoDone done) {
  if (!attached()) {
    CompleteLater(std::move(done), Status::OK());  // a hint, and there is no cache to fill
    return;
  }
  struct Prefetch {
    CachedDevice* d;
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
      d->DoRead(r, [this](Status st) {
        if (!st.ok()) next = end;  // a hint: stop quietly, the client's reads will retry
        Step();
      }, true);
    }
  };
  size_t cap = 0;
  uint8_t* buf = BufferPool::ForThread().Get(1 << 20, &cap);
  (new Prefetch{this, offset, offset + len, std::move(done), buf, cap})->Step();
}

void CachedDevice::DoRead(const IoRequest& req, IoDone done, bool prefetch) {
  ReadOp* op = ReadOp::New();
  op->d = this;
  op->req = req;
  op->done = std::move(done);
  op->prefetch = prefetch;
  op->bypass = prefetch ? set_->knobs().cache_mode.load(std::memory_order_relaxed) == CacheMode::kNone
                        : ShouldBypass(req, false);
  // The sequence is taken before the lookup: any write from here on makes a
  // fill of what we read from the backing device a collision.
  op->since = set_->index().Sequence(dev_, req.offset, req.len);
  // Reused per thread: the loop below only issues I/O (completions never
  // run inside Submit), so nothing re-enters DoRead while it is in use.
  thread_local std::vector<Extent> hits;
  Status st = set_->index().Lookup(dev_, req.offset, req.len, &hits);
  if (!st.ok()) {
    // The index cannot be read: serve the whole request from the backing device.
    UB_WARN("{}: index lookup failed, reading from the backing device: {}", spec_, st.ToString());
    hits.clear();
  }
  BucketAllocator& buckets = set_->buckets();
  uint64_t cursor = req.offset;
  uint64_t miss_start = req.offset, miss_len = 0;
  auto flush_miss = [&] {
    if (miss_len) ReadBacking(op, miss_start, miss_len, false);
    miss_len = 0;
  };
  auto add_miss = [&](uint64_t s, uint64_t l) {
    op->all_hit = false;
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
    } else {
      flush_miss();
      buckets.Touch(buckets.BucketOf(e.cache_offset));
      op->pending++;
      uint8_t* dst = static_cast<uint8_t*>(req.buf) + (e.start - req.offset);
      uint64_t t0 = NowNanos();
      Extent ex = e;
      set_->cache_dev()->Read(ex.cache_offset, ex.len, dst, [this, op, ex, t0](Status st) {
        uint64_t now = NowNanos();
        set_->congestion().Observe((now - t0) / 1000,
                                   set_->knobs().congested_read_threshold_us.load(std::memory_order_relaxed),
                                   now / 1000);
        // Only cache read errors are recoverable: fall back to the backing
        // device, and if the bucket was reused meanwhile, the same.
        if (!st.ok() || !set_->buckets().Valid(ex.cache_offset, ex.gen)) {
          if (!st.ok()) UB_WARN("{}: cache read failed, reading the backing device: {}", spec_, st.ToString());
          op->all_hit = false;
          ReadBacking(op, ex.start, ex.len, true);
          PieceDone(op, Status::OK());
          return;
        }
        PieceDone(op, Status::OK());
      });
    }
    cursor = e.end();
  }
  if (cursor < req.offset + req.len) add_miss(cursor, req.offset + req.len - cursor);
  flush_miss();
  PieceDone(op, Status::OK());  // drop the "still issuing" reference
}

void CachedDevice::Fill(uint64_t start, uint64_t len, const uint8_t* data, uint64_t since) {
  const uint64_t bucket = set_->options().bucket_size;
  ReplacementPolicy policy = set_->knobs().replacement.load(std::memory_order_relaxed);
  for (uint64_t off = 0; off < len; off += bucket) {
    uint64_t n = std::min(bucket, len - off);
    auto space = set_->buckets().Allocate(Reactor::Current()->id(), n, policy);
    if (!space.ok()) return;  // the cache is full of what it cannot drop: just don't cache
    size_t cap = 0;
    uint8_t* copy = BufferPool::ForThread().Get(n, &cap);
    std::memcpy(copy, data + off, n);
    Extent e{dev_, start + off, n, space->cache_offset, space->gen, false};
    set_->cache_dev()->Write(e.cache_offset, n, copy, 0, [this, e, since, copy, cap](Status st) {
      BufferPool::ForThread().Put(copy, cap);
      set_->buckets().WriteDone(set_->buckets().BucketOf(e.cache_offset));
      if (!st.ok()) {
        UB_WARN("{}: cache write failed: {}", spec_, st.ToString());
        return;
      }
      bool inserted = false;
      Status ist = set_->index().InsertIfUnchanged(e, since, &inserted);
      if (!ist.ok())
        UB_WARN("{}: index insert failed: {}", spec_, ist.ToString());
      else if (!inserted)
        stats_.CountMissCollision();
    });
  }
}

// ---- writes ----

struct CachedDevice::WriteOp {
  IoRequest req;
  IoDone done;
  int pending = 1;
  Status backing_status;
  bool cache_ok = true;
  std::vector<Extent> extents;  // written to the cache, to insert when all is done
};

void CachedDevice::DoWrite(const IoRequest& req, IoDone done) {
  bool bypass = !attached() || ShouldBypass(req, true);
  // Nothing stale may be read from the cache while this write is in flight.
  Status st = set_->index().Invalidate(dev_, req.offset, req.len);
  if (!st.ok()) {
    CompleteLater(std::move(done), st);
    return;
  }
  auto* op = new WriteOp();
  op->req = req;
  op->done = std::move(done);
  auto finish = [this, op]() {
    if (--op->pending > 0) return;
    if (op->backing_status.ok() && op->cache_ok && !op->extents.empty()) {
      for (const Extent& e : op->extents) {
        Status ist = set_->index().Insert(e);
        if (!ist.ok()) UB_WARN("{}: index insert failed: {}", spec_, ist.ToString());
      }
    } else {
      // Bypassed, failed, or cache copy incomplete: drop whatever may have
      // been cached meanwhile (fills of racing misses included).
      (void)set_->index().Invalidate(dev_, op->req.offset, op->req.len);
    }
    IoDone d = std::move(op->done);
    Status result = std::move(op->backing_status);
    delete op;
    d(std::move(result));
  };
  if (bypass) stats_.CountBypassed(req.len);
  op->pending++;
  backing_->Write(req.offset, req.len, req.buf, req.flags,
                  [op, finish](Status st) mutable {
                    op->backing_status = std::move(st);
                    finish();
                  });
  if (!bypass) {
    const uint64_t bucket = set_->options().bucket_size;
    ReplacementPolicy policy = set_->knobs().replacement.load(std::memory_order_relaxed);
    for (uint64_t off = 0; off < req.len; off += bucket) {
      uint64_t n = std::min(bucket, req.len - off);
      auto space = set_->buckets().Allocate(Reactor::Current()->id(), n, policy);
      if (!space.ok()) {
        op->cache_ok = false;
        break;
      }
      Extent e{dev_, req.offset + off, n, space->cache_offset, space->gen, false};
      op->extents.push_back(e);
      op->pending++;
      uint64_t t0 = NowNanos();
      set_->cache_dev()->Write(e.cache_offset, n, static_cast<uint8_t*>(req.buf) + off, 0,
                               [this, op, finish, t0, b = space->bucket](Status st) mutable {
                                 set_->buckets().WriteDone(b);
                                 uint64_t now = NowNanos();
                                 set_->congestion().Observe(
                                     (now - t0) / 1000,
                                     set_->knobs().congested_write_threshold_us.load(std::memory_order_relaxed),
                                     now / 1000);
                                 if (!st.ok()) op->cache_ok = false;
                                 finish();
                               });
    }
  }
  finish();
}

void CachedDevice::DoFlush(IoDone done) {
  struct FlushOp {
    IoDone done;
    int pending = 2;
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
  backing_->Flush(part);
  set_->cache_dev()->Flush(part);
}

void CachedDevice::DoDiscard(const IoRequest& req, IoDone done) {
  Status st = set_->index().Invalidate(dev_, req.offset, req.len);
  if (!st.ok()) {
    CompleteLater(std::move(done), st);
    return;
  }
  backing_->Submit(req, [this, req, done = std::move(done)](Status st2) mutable {
    (void)set_->index().Invalidate(dev_, req.offset, req.len);
    done(std::move(st2));
  });
}

}  // namespace ubcache
