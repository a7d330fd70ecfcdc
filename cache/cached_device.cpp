// SPDX-License-Identifier: Apache-2.0
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

// Per-request objects that are begun and ended on one reactor thread
// (completions run where they were submitted): each thread recycles its own,
// so the hit path does not malloc.
template <typename T>
class Recycled {
 public:
  static T* New() {
    auto& pool = Pool();
    if (pool.empty()) return new T();
    T* op = pool.back();
    pool.pop_back();
    return op;
  }
  static void Recycle(T* op) {
    auto& pool = Pool();
    if (pool.size() >= kKeep) {
      delete op;
      return;
    }
    *op = T();
    pool.push_back(op);
  }

 private:
  static constexpr size_t kKeep = 1024;
  struct Owned : std::vector<T*> {
    ~Owned() {
      for (T* op : *this) delete op;
    }
  };
  static Owned& Pool() {
    thread_local Owned pool;
    return pool;
  }
};

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
  bool around_cache = false;  // clean hits too are read from the backing device
  bool prefetch = false;  // counted as a readahead, not a hit or miss
  bool all_hit = true;
  uint64_t since = 0;
  // When a client read entered (DoSubmit's clock reading), for RequestStats;
  // 0: not recorded here (a prefetch step, or a read whose done records it).
  uint64_t start_ns = 0;
  int pending = 1;  // pieces in flight, plus one until all are issued
  Status status;
};

// A client request in flight, for RequestStats: its completion passes through
// here, which records what it was, how long it took and whether it failed.
struct CachedDevice::Timed {
  CachedDevice* d = nullptr;
  RequestStats::Op op = RequestStats::kRead;
  uint64_t len = 0;
  uint64_t start_ns = 0;
  IoDone done;
};

CachedDevice::CachedDevice(std::string spec, CacheSet* set, uint32_t dev_index,
                           BlockDevice* backing, BackingSuper* super)
    : BlockDevice(std::move(spec), UsableSize(backing, BlockSizeFor(backing, set->cache_dev())),
                  BlockSizeFor(backing, set->cache_dev()), backing->read_only()),
      set_(set),
      dev_(dev_index),
      backing_(backing),
      super_(super),
      handshake_(super && super->state() == BackingState::kDirty),
      ranges_(spec_, set, dev_index) {
  if (super_ && set_->persistent() && !backing->read_only()) {
    writeback_ = std::make_unique<Writeback>(Writeback::Parts{.spec = spec_,
                                                              .set = set_,
                                                              .dev = dev_,
                                                              .size = size(),
                                                              .backing = backing_,
                                                              .super = super_,
                                                              .ranges = &ranges_,
                                                              .handshake = &handshake_,
                                                              .activity = &activity_,
                                                              .backing_time = &backing_time_,
                                                              .host = this});
    writeback_->Start();
    can_writeback_ = true;
  }
}

CachedDevice::~CachedDevice() { writeback_.reset(); }

std::string CachedDevice::Describe() const {
  return backing_->Describe() + " cached on " + set_->cache_dev()->spec() + " (" +
         CacheModeName(set_->knobs().cache_mode.load()) + ")";
}

bool CachedDevice::ShouldBypass(const IoRequest& req, bool write, bool* around_cache) {
  CacheKnobs& k = set_->knobs();
  CacheMode mode = k.cache_mode.load(std::memory_order_relaxed);
  if (mode == CacheMode::kNone) return true;
  if (write && mode == CacheMode::kWritearound) return true;
  uint64_t cutoff = k.sequential_cutoff.load(std::memory_order_relaxed);
  uint32_t read_us = k.congested_read_threshold_us.load(std::memory_order_relaxed);
  uint32_t write_us = k.congested_write_threshold_us.load(std::memory_order_relaxed);
  uint64_t now = NowNanos();
  // bcache's score, from the fixed thresholds only ("auto" takes no part).
  uint64_t congested = set_->congestion().CongestedCutoff(FixedThresholdUs(read_us), FixedThresholdUs(write_us),
                                                          now / 1000);
  bool auto_congested = (write ? write_us : read_us) == kAutoThresholdUs &&
                        AutoCongested(set_->cache_time(), backing_time_,
                                      write ? ServiceTime::Op::kWrite : ServiceTime::Op::kRead, req.len, now);
  if (cutoff == 0 && congested == 0 && !auto_congested) return false;
  // bcache's check_should_bypass: in writeback, a sync write (here: FUA, the
  // only sync hint NBD and ublk carry — a journal commit, an O_DSYNC write)
  // is cached whatever its stream, unless the cache is congested; making it
  // wait for the backing device is what the cache is there to avoid.
  if (write && mode == CacheMode::kWriteback && (req.flags & kIoFua) && congested == 0 && !auto_congested)
    return false;
  uint64_t run;
  {
    MutexLock l(&detector_mu_);
    run = detector_.Observe(dev_, req.offset, req.len, now);
  }
  if (auto_congested) {
    auto_congested_bypasses_.fetch_add(1, std::memory_order_relaxed);
    if (around_cache) *around_cache = true;
    return true;
  }
  bool sequential = cutoff == kAutoCutoff ? run >= kAutoStreamBytes && !AdmitStream(req, now)
                                          : cutoff && run >= cutoff;
  if (sequential) {
    sequential_bypasses_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (congested && run >= congested) {
    congested_bypasses_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

bool CachedDevice::AdmitStream(const IoRequest& req, uint64_t now_ns) {
  BucketAllocator& b = set_->buckets();
  BucketAllocator::Usage u = b.usage();
  // Free buckets, and those GC found empty: caching the stream in either
  // drops no cached data.
  if (SpareSpace(u.free + u.dead, b.free_target(), u.buckets - u.reserved)) {
    spare_admissions_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  MutexLock l(&detector_mu_);
  if (ghosts_.Contains(dev_, req.offset, req.len, now_ns)) {
    ghost_admissions_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  ghosts_.Add(dev_, req.offset, req.len, now_ns);
  return false;
}

Status CachedDevice::DropExtents() { return set_->DropDevice(dev_, size()); }

Status CachedDevice::Detach() {
  if (fenced()) return Status::Busy(spec_ + " is fenced: its cached data stays where it is");
  attached_.store(false, std::memory_order_release);
  return DropExtents();
}

Status CachedDevice::Attach() {
  UB_RETURN_IF_ERROR(DropExtents());
  attached_.store(true, std::memory_order_release);
  return Status::OK();
}

void CachedDevice::Fence(const std::string& why) {
  {
    std::lock_guard<std::mutex> l(fence_mu_);
    if (fenced()) return;
    fence_reason_ = why;
    fenced_.store(true, std::memory_order_release);
  }
  UB_ERROR("{}: FENCED: {}. Every request fails from now on, and its {} of dirty data is neither served "
           "nor written back; restart with --after-fence once the image's new owner is done with it",
           spec_, why, FormatSize(dirty_bytes()));
  // Writes waiting for the backing superblock go on, to fail below.
  handshake_.SetDirtyOk(false);
  if (writeback_) writeback_->Kick();  // it records the fence
}

std::string CachedDevice::fence_reason() const {
  std::lock_guard<std::mutex> l(fence_mu_);
  return fence_reason_;
}

namespace {
Status FencedError(const std::string& spec, IoOp op) {
  return Status::IoError(spec + ": " + IoOpName(op) + " refused: fenced (another client owns the device)");
}
}  // namespace

// RequestStats counts IoOps under their own numbers.
static_assert(RequestStats::kRead == static_cast<int>(IoOp::kRead) &&
              RequestStats::kWrite == static_cast<int>(IoOp::kWrite) &&
              RequestStats::kFlush == static_cast<int>(IoOp::kFlush) &&
              RequestStats::kDiscard == static_cast<int>(IoOp::kDiscard) &&
              RequestStats::kWriteZeroes == static_cast<int>(IoOp::kWriteZeroes));

IoDone CachedDevice::Timing(RequestStats::Op op, uint64_t len, uint64_t start_ns, IoDone done) {
  Timed* t = Recycled<Timed>::New();
  t->d = this;
  t->op = op;
  t->len = len;
  t->start_ns = start_ns;
  t->done = std::move(done);
  return [t](Status st) {
    // Recorded by the completing thread, into its own shard: the one that
    // submitted, as completions run where they were submitted.
    t->d->requests_.Record(Reactor::Current()->id(), t->op, t->len, NowNanos() - t->start_ns, st.ok());
    IoDone client = std::move(t->done);
    Recycled<Timed>::Recycle(t);
    client(std::move(st));
  };
}

void CachedDevice::DoSubmit(const IoRequest& req, IoDone client) {
  // One clock reading for the writeback thread's idle test and the latency.
  const uint64_t now = NowNanos();
  activity_.Request(now);
  // The hot path, a read through the cache, records itself when its last
  // piece completes (PieceDone), with the clock reading that piece's
  // completion took anyway: no wrapper, no second reading. Any other
  // request is recorded by a wrapper of its completion.
  if (req.op == IoOp::kRead && !fenced() && attached()) {
    DoRead(req, std::move(client), false, now);
    return;
  }
  IoDone done = Timing(static_cast<RequestStats::Op>(req.op), req.len, now, std::move(client));
  if (fenced()) {
    CompleteLater(std::move(done), FencedError(spec_, req.op));
    return;
  }
  switch (req.op) {
    // A read here is detached (the hot path above took the rest): the index
    // is not ours to read.
    case IoOp::kRead: backing_->Submit(req, std::move(done)); return;
    case IoOp::kWrite: DoWrite(req, std::move(done)); return;
    case IoOp::kFlush: DoFlush(std::move(done)); return;
    case IoOp::kDiscard:
    case IoOp::kWriteZeroes: DoDiscard(req, std::move(done)); return;
  }
}

// ---- reads ----

void CachedDevice::PieceDone(ReadOp* op, Status st, uint64_t now_ns) {
  if (!st.ok() && op->status.ok()) op->status = std::move(st);
  if (--op->pending > 0) return;
  if (op->start_ns) {
    if (now_ns == 0) now_ns = NowNanos();
    requests_.Record(Reactor::Current()->id(), RequestStats::kRead, op->req.len, now_ns - op->start_ns,
                     op->status.ok());
  }
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
  Recycled<ReadOp>::Recycle(op);
  done(std::move(result));
}

void CachedDevice::ReadBacking(ReadOp* op, uint64_t start, uint64_t len, bool was_hit) {
  op->pending++;
  uint8_t* dst = static_cast<uint8_t*>(op->req.buf) + (start - op->req.offset);
  bool fill = !op->bypass && !was_hit;
  uint64_t t0 = NowNanos();
  activity_.BackingRead(t0);
  backing_->Read(start, len, dst, [this, op, start, len, dst, fill, t0](Status st) {
    uint64_t now = NowNanos();
    if (st.ok()) backing_time_.Observe(ServiceTime::Op::kRead, len, now - t0, now);
    // Fill after the client has its data: copy now, the buffer is theirs.
    if (st.ok() && fill) Fill(start, len, dst, op->since);
    PieceDone(op, std::move(st), fill ? 0 : now);  // the client waited for the fill's copy too
  });
}

void CachedDevice::DoPrefetch(uint64_t offset, uint64_t len, IoDone client) {
  IoDone done = Timing(RequestStats::kCache, len, NowNanos(), std::move(client));
  if (fenced()) {
    CompleteLater(std::move(done), FencedError(spec_, IoOp::kRead));
    return;
  }
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

void CachedDevice::DoRead(const IoRequest& req, IoDone done, bool prefetch, uint64_t start_ns) {
  if (set_->failed()) {
    if (start_ns) done = Timing(RequestStats::kRead, req.len, start_ns, std::move(done));
    // A failed cache: the backing device has everything but the dirty
    // ranges, whose only copy is on the failed device — those answer EIO,
    // never the backing device's stale data.
    thread_local std::vector<Extent> found;
    Status st = set_->index().Lookup(dev_, req.offset, req.len, &found);
    bool dirty = !st.ok() || std::any_of(found.begin(), found.end(), [](const Extent& e) { return e.dirty; });
    if (dirty) {
      CompleteLater(std::move(done), Status::IoError(spec_ + ": dirty data on a failed cache device"));
      return;
    }
    backing_->Submit(req, std::move(done));
    return;
  }
  ReadOp* op = Recycled<ReadOp>::New();
  op->d = this;
  op->req = req;
  op->done = std::move(done);
  op->prefetch = prefetch;
  op->start_ns = start_ns;
  op->bypass = prefetch ? set_->knobs().cache_mode.load(std::memory_order_relaxed) == CacheMode::kNone
                        : ShouldBypass(req, false, &op->around_cache);
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
      op->pending++;
      uint8_t* dst = static_cast<uint8_t*>(req.buf) + (e.start - req.offset);
      uint64_t t0 = NowNanos();
      Extent ex = e;
      set_->cache_dev()->Read(ex.cache_offset, ex.len, dst, [this, op, ex, t0](Status st) {
        uint64_t now = NowNanos();
        set_->cache_time().Observe(ServiceTime::Op::kRead, ex.len, now - t0, now);
        set_->congestion().Observe(
            (now - t0) / 1000,
            FixedThresholdUs(set_->knobs().congested_read_threshold_us.load(std::memory_order_relaxed)), now / 1000);
        // A dirty extent is the only copy: its read error is the client's
        // (never the stale backing data).
        if (!st.ok()) set_->CountIoError(st);
        if (!st.ok() && ex.dirty) {
          UB_WARN("{}: cache read of dirty data failed: {}", spec_, st.ToString());
          PieceDone(op, std::move(st), now);
          return;
        }
        // Only cache read errors are recoverable: fall back to the backing
        // device, and if the bucket was reused meanwhile, the same.
        if (!st.ok() || !set_->buckets().Valid(ex.cache_offset, ex.gen)) {
          if (!st.ok()) UB_WARN("{}: cache read failed, reading the backing device: {}", spec_, st.ToString());
          op->all_hit = false;
          ReadBacking(op, ex.start, ex.len, true);
          PieceDone(op, Status::OK());
          return;
        }
        PieceDone(op, Status::OK(), now);
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
    if (!space.ok()) {  // the cache is full of what it cannot drop: just don't cache
      cache_full_bypasses_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    size_t cap = 0;
    uint8_t* copy = BufferPool::ForThread().Get(n, &cap);
    std::memcpy(copy, data + off, n);
    Extent e{.dev = dev_, .start = start + off, .len = n, .cache_offset = space->cache_offset,
             .gen = space->gen, .dirty = false};
    set_->cache_dev()->Write(e.cache_offset, n, copy, 0, [this, e, since, copy, cap](Status st) {
      BufferPool::ForThread().Put(copy, cap);
      if (!st.ok()) {
        set_->CountIoError(st);
        set_->buckets().WriteDone(set_->buckets().BucketOf(e.cache_offset));
        UB_WARN("{}: cache write failed: {}", spec_, st.ToString());
        return;
      }
      bool inserted = false;
      Status ist = set_->index().InsertIfUnchanged(e, since, &inserted);
      set_->buckets().WriteDone(set_->buckets().BucketOf(e.cache_offset));  // after the insert
      if (!ist.ok())
        UB_WARN("{}: index insert failed: {}", spec_, ist.ToString());
      else if (!inserted)
        stats_.CountMissCollision();
    });
  }
}

void CachedDevice::Finish(IoDone done, Status st, bool commit) {
  if (!commit || !st.ok()) {
    done(std::move(st));
    return;
  }
  set_->CommitAsync(std::move(done));
}

bool CachedDevice::ShouldWriteback(const IoRequest& req, bool overlaps_dirty, bool bypass) {
  // bcache's should_writeback, with the cutoffs as percent of the cache in
  // use (dirty or metadata).
  CacheKnobs& k = set_->knobs();
  unsigned in_use = set_->in_use_percent();
  if (in_use > k.cutoff_writeback_sync.load(std::memory_order_relaxed)) return WriteThroughAtCutoff();
  // A write over dirty data never bypasses: the dirty copy would otherwise
  // be the newer one in the index while the backing device got the write.
  if (overlaps_dirty) return true;
  if (bypass) return false;
  if (req.flags & kIoFua) return true;  // sync writes: up to the sync cutoff
  return in_use <= k.cutoff_writeback.load(std::memory_order_relaxed) || WriteThroughAtCutoff();
}

bool CachedDevice::WriteThroughAtCutoff() {
  // Dirty data fills the cache to the cutoff: this write goes to the
  // spindle in the foreground, one random write at a time. The dirty data
  // in its way leaves faster as sorted writeback than it could at the PI
  // controller's rate, so the writeback thread runs at full speed while
  // writes are being turned away (Writeback::Pass), and wakes from its
  // writeback_delay sleep now.
  cutoff_writethroughs_.fetch_add(1, std::memory_order_relaxed);
  bool recently = activity_.TurnedAway(NowNanos());
  if (writeback_ && !recently) writeback_->Kick();
  return false;
}

void CachedDevice::DoWrite(const IoRequest& req, IoDone done, bool dropped_before, bool dirty_refused) {
  if (fenced()) {  // a write that waited (AfterWriteback, the backing superblock) meets it here
    CompleteLater(std::move(done), FencedError(spec_, req.op));
    return;
  }
  if (set_->failed()) {
    // The backing device alone; afterwards the range's extents (dirty ones
    // included: the backing device now has newer data) are dropped.
    backing_->Submit(req, [this, req, done = std::move(done)](Status st) mutable {
      BackingWriteDone();
      if (st.ok()) (void)set_->index().Invalidate(dev_, req.offset, req.len);
      done(std::move(st));
    });
    return;
  }
  // Nothing stale may be read from the cache while this write is in flight:
  // clean copies go now. Dirty ones stay (the only copy of acknowledged
  // data) until this write's insert replaces them in one step, so no
  // commit in between can leave the range with neither the old data nor
  // the new: that would read back the backing device's older copy.
  bool has_dirty = false;
  uint64_t dropped = 0;
  Status st = set_->index().InvalidateClean(dev_, req.offset, req.len, &has_dirty, &dropped);
  if (!st.ok()) {
    CompleteLater(std::move(done), st);
    return;
  }
  // Clean copies removed (by this pass or an earlier one): if the data goes
  // to the backing device, their removal is committed first (AfterCleanDropped).
  bool dropped_clean = dropped_before || dropped > 0;
  CacheMode mode = set_->knobs().cache_mode.load(std::memory_order_relaxed);
  bool seq_bypass = !attached() || ShouldBypass(req, true);  // once: it feeds the stream detector
  if (attached() && mode == CacheMode::kWriteback && writeback_ && !(dirty_refused && !has_dirty) &&
      ShouldWriteback(req, has_dirty, seq_bypass) && WriteBack(req, done, has_dirty, dropped_clean))
    return;
  // A write over dirty data is cached even when it goes through (bcache).
  bool bypass = !attached() || (seq_bypass && !has_dirty);
  // In the writeback path WriteBack gave `done` back when it could not take the write.
  WriteThrough(req, std::move(done), bypass, has_dirty, dropped_clean);
}

void CachedDevice::WriteCache(const Extent& e, const uint8_t* data, Callback<void(bool)> done) {
  uint64_t t0 = NowNanos();
  set_->cache_dev()->Write(e.cache_offset, e.len, data, 0,
                           [this, t0, len = e.len, done = std::move(done)](Status st) mutable {
                             // Its latency feeds congestion; its error counts toward io_error_limit.
                             uint64_t now = NowNanos();
                             set_->cache_time().Observe(ServiceTime::Op::kWrite, len, now - t0, now);
                             set_->congestion().Observe(
                                 (now - t0) / 1000,
                                 FixedThresholdUs(
                                     set_->knobs().congested_write_threshold_us.load(std::memory_order_relaxed)),
                                 now / 1000);
                             if (!st.ok()) set_->CountIoError(st);
                             done(st.ok());
                           });
}

struct WriteBackOp {
  IoRequest req;
  IoDone done;
  int pending = 1;
  bool ok = true;
  std::vector<Extent> extents;
};

bool CachedDevice::WriteBack(const IoRequest& req, IoDone& done, bool has_dirty, bool dropped_clean) {
  // Rule 7: `dirty` is durable on the backing device before the first
  // dirty write is acknowledged. If it is not yet, the writeback thread
  // writes it and this write starts again (through, if that failed).
  if (!handshake_.Enter([&]() -> Callback<void(bool)> {
        return [this, r = req, d = std::move(done), dropped_clean](bool refused) mutable {
          DoWrite(r, std::move(d), dropped_clean, refused);
        };
      })) {
    writeback_->Kick();
    return true;
  }
  const uint64_t bucket = set_->options().bucket_size;
  ReplacementPolicy policy = set_->knobs().replacement.load(std::memory_order_relaxed);
  auto* op = new WriteBackOp();
  op->req = req;
  for (uint64_t off = 0; off < req.len; off += bucket) {
    uint64_t n = std::min(bucket, req.len - off);
    auto space = set_->buckets().Allocate(Reactor::Current()->id(), n, policy);
    if (!space.ok()) {
      // The cache is full of what it cannot drop: write through instead
      // (never an error for the client, never a wait without bound).
      cache_full_bypasses_.fetch_add(1, std::memory_order_relaxed);
      for (const Extent& e : op->extents) set_->buckets().WriteDone(set_->buckets().BucketOf(e.cache_offset));
      delete op;
      handshake_.Leave();
      return false;
    }
    op->extents.push_back(Extent{.dev = dev_,
                                 .start = req.offset + off,
                                 .len = n,
                                 .cache_offset = space->cache_offset,
                                 .gen = space->gen,
                                 .dirty = true});
  }
  op->done = std::move(done);
  auto finish = [this, op, has_dirty, dropped_clean]() {
    if (--op->pending > 0) return;
    Status result;
    if (op->ok) {
      // The data is on the cache device: insert it dirty, checked (with its
      // data's hash), so that the soft commit below may carry it.
      for (const Extent& e : op->extents) {
        const uint8_t* data = static_cast<const uint8_t*>(op->req.buf) + (e.start - op->req.offset);
        Status ist = set_->index().Insert(e, data);
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
    for (const Extent& e : op->extents) set_->buckets().WriteDone(set_->buckets().BucketOf(e.cache_offset));
    handshake_.Leave();
    IoRequest req = op->req;
    IoDone d = std::move(op->done);
    bool fua = req.flags & kIoFua;
    delete op;
    if (!result.ok()) {
      // The cache could not take it: the backing device still can.
      UB_WARN("{}: writeback write failed ({}); writing through", spec_, result.ToString());
      WriteThrough(req, std::move(d), !has_dirty, has_dirty, dropped_clean);
      return;
    }
    // Acknowledged once its journal entry is written: FUA, durably (its data
    // and the entry that finds it); otherwise soft — the entry survives a
    // crash of the daemon at once (so kill -9, or a ublk recovery, never
    // reverts an acknowledged write) and a power cut from the next hard
    // commit, within journal_delay_ms or at the next FLUSH.
    set_->CommitAsync(std::move(d), !fua);
  };
  for (const Extent& e : op->extents) {
    op->pending++;
    WriteCache(e, static_cast<uint8_t*>(req.buf) + (e.start - req.offset), [op, finish](bool ok) mutable {
      if (!ok) op->ok = false;
      finish();
    });
  }
  finish();
  return true;
}

// ---- writes ----

struct CachedDevice::WriteOp {
  IoRequest req;
  IoDone done;
  int pending = 1;
  Status backing_status;
  bool cache_ok = true;
  bool commit = false;
  std::vector<Extent> extents;  // written to the cache, to insert when all is done
};

void CachedDevice::WriteThrough(const IoRequest& req, IoDone done, bool bypass, bool has_dirty,
                                bool dropped_clean) {
  auto* op = new WriteOp();
  op->req = req;
  op->done = std::move(done);
  // Durability of what the index forgot: a FUA write, or one that replaced
  // dirty data, is acknowledged only once the invalidation is committed —
  // else a crash would replay the old copy (and writeback write it over
  // this one).
  op->commit = set_->persistent() && (has_dirty || (req.flags & kIoFua));
  auto finish = [this, op, has_dirty]() {
    if (--op->pending > 0) return;
    if (op->backing_status.ok() && op->cache_ok && !op->extents.empty()) {
      for (const Extent& e : op->extents) {
        Status ist = set_->index().Insert(e);
        if (!ist.ok()) UB_WARN("{}: index insert failed: {}", spec_, ist.ToString());
      }
    } else {
      // Bypassed, failed, or cache copy incomplete: drop whatever may have
      // been cached meanwhile (fills of racing misses included).
      // A failed backing write keeps dirty copies: they are still the data.
      uint64_t more = 0;
      bool still_dirty = false;
      Status ist = op->backing_status.ok()
                       ? set_->index().Invalidate(dev_, op->req.offset, op->req.len, &more)
                       : set_->index().InvalidateClean(dev_, op->req.offset, op->req.len, &still_dirty);
      if (!ist.ok()) UB_WARN("{}: index invalidate failed: {}", spec_, ist.ToString());
      if (more) op->commit = set_->persistent();
    }
    if (has_dirty) ranges_.ReleaseForeground(op->req.offset, op->req.offset + op->req.len);
    // After the insert: a bucket reclaimed before it would turn the new
    // extent stale at once.
    for (const Extent& e : op->extents) set_->buckets().WriteDone(set_->buckets().BucketOf(e.cache_offset));
    IoDone d = std::move(op->done);
    Status result = std::move(op->backing_status);
    bool commit = op->commit;
    delete op;
    Finish(std::move(d), std::move(result), commit);
  };
  if (bypass) stats_.CountBypassed(req.len);
  if (!bypass) {
    const uint64_t bucket = set_->options().bucket_size;
    ReplacementPolicy policy = set_->knobs().replacement.load(std::memory_order_relaxed);
    for (uint64_t off = 0; off < req.len; off += bucket) {
      uint64_t n = std::min(bucket, req.len - off);
      auto space = set_->buckets().Allocate(Reactor::Current()->id(), n, policy);
      if (!space.ok()) {
        cache_full_bypasses_.fetch_add(1, std::memory_order_relaxed);
        op->cache_ok = false;
        break;
      }
      Extent e{.dev = dev_, .start = req.offset + off, .len = n, .cache_offset = space->cache_offset,
               .gen = space->gen, .dirty = false};
      op->extents.push_back(e);
      op->pending++;
      WriteCache(e, static_cast<uint8_t*>(req.buf) + off, [op, finish](bool ok) mutable {
        if (!ok) op->cache_ok = false;
        finish();
      });
    }
  }
  // The backing write waits for any writeback of the range in flight, so
  // writeback's older copy never lands after it; over dirty data it also
  // holds the range until its insert, so writeback does not start on the
  // dirty copy it replaces.
  op->pending++;
  // Over dirty data the backing copy must be durable before the commit
  // that drops the dirty one (a power cut must find one or the other): FUA.
  uint32_t backing_flags = req.flags | (has_dirty ? uint32_t{kIoFua} : uint32_t{0});
  auto issue = [this, op, finish, backing_flags]() mutable {
    uint64_t t0 = NowNanos();
    backing_->Write(op->req.offset, op->req.len, op->req.buf, backing_flags,
                    [this, op, finish, t0](Status st) mutable {
                      BackingWriteDone();
                      uint64_t now = NowNanos();
                      if (st.ok()) backing_time_.Observe(ServiceTime::Op::kWrite, op->req.len, now - t0, now);
                      op->backing_status = std::move(st);
                      finish();
                    });
  };
  // Rule 5: every clean copy of the range leaves the journal before the
  // backing device can hold this data (those DoWrite dropped, and those
  // made while this write waited for writeback).
  ranges_.BeforeBackingWrite(req.offset, req.len, has_dirty, dropped_clean, std::move(issue));
  finish();
}

void CachedDevice::DoFlush(IoDone done) {
  // Like a disk's volatile cache: every write acknowledged before this is
  // durable when it returns — backing device flushed (when it needs it, see
  // below), cache device flushed, and the journal committed (which flushes
  // the cache device first). Ordering rule 8 (doc/design.md).
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
    backing_->Flush([this, written, part](Status st) {
      if (st.ok()) {
        uint64_t seen = backing_flushed_.load(std::memory_order_seq_cst);
        while (seen < written && !backing_flushed_.compare_exchange_weak(seen, written)) {
        }
      }
      part(std::move(st));
    });
  }
  set_->cache_dev()->Flush(part);
  set_->CommitAsync(part);
}

void CachedDevice::DoDiscard(const IoRequest& req, IoDone done) {
  bool has_dirty = false;
  uint64_t dropped = 0;
  Status st = set_->index().InvalidateClean(dev_, req.offset, req.len, &has_dirty, &dropped);
  if (!st.ok()) {
    CompleteLater(std::move(done), st);
    return;
  }
  auto issue = [this, req, has_dirty, done = std::move(done)]() mutable {
    IoRequest down = req;
    // Over dirty data, durable below before the commit that drops it.
    if (has_dirty && req.op == IoOp::kWriteZeroes) down.flags |= kIoFua;
    backing_->Submit(down, [this, req, has_dirty, done = std::move(done)](Status st2) mutable {
      BackingWriteDone();
      if (st2.ok() && has_dirty && req.op == IoOp::kDiscard) {
        // A discard has no FUA: flush it down first.
        backing_->Flush([this, req, has_dirty, done = std::move(done)](Status st3) mutable {
          DiscardDone(req, has_dirty, std::move(st3), std::move(done));
        });
        return;
      }
      DiscardDone(req, has_dirty, std::move(st2), std::move(done));
    });
  };
  // As for a write (WriteThrough): the range's clean copies leave the
  // journal before the backing device discards under them.
  ranges_.BeforeBackingWrite(req.offset, req.len, has_dirty, dropped > 0, std::move(issue));
}

void CachedDevice::DiscardDone(const IoRequest& req, bool has_dirty, Status st2, IoDone done) {
  {
    {
      // Dirty copies go only once the backing device has the discard (a
      // failed discard keeps them: they are still the data).
      uint64_t more = 0;
      bool still = false;
      Status ist = st2.ok() ? set_->index().Invalidate(dev_, req.offset, req.len, &more)
                            : set_->index().InvalidateClean(dev_, req.offset, req.len, &still);
      if (!ist.ok()) UB_WARN("{}: index invalidate failed: {}", spec_, ist.ToString());
      if (has_dirty) ranges_.ReleaseForeground(req.offset, req.offset + req.len);
      // Discarding dirty data: the invalidation is durable before the ack,
      // so no replay brings the old copy back over the discarded range.
      Finish(std::move(done), std::move(st2), set_->persistent() && (has_dirty || more > 0));
    }
  }
}

}  // namespace ubcache
