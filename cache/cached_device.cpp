// SPDX-License-Identifier: Apache-2.0
#include "cache/cached_device.h"

#include <cstring>

#include <algorithm>
#include <memory>

#include "cache/index_call.h"
#include "cache/request_timing.h"
#include "util/aligned_buffer.h"
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

Status FencedError(const std::string& spec, IoOp op) {
  return Status::IoError(spec + ": " + IoOpName(op) + " refused: fenced (another client owns the device)");
}

}  // namespace

CachedDevice::CachedDevice(std::string spec, CacheSet* set, uint32_t dev_index,
                           BlockDevice* backing, BackingSuper* super)
    : BlockDevice(std::move(spec), UsableSize(backing, BlockSizeFor(backing, set->cache_dev())),
                  BlockSizeFor(backing, set->cache_dev()), backing->read_only()),
      set_(set),
      dev_(dev_index),
      backing_(backing),
      super_(super),
      handshake_(super && super->state() == BackingState::kDirty),
      ranges_(spec_, set, dev_index),
      cache_io_(set, dev_index),
      bypass_(set, dev_index, &backing_time_),
      durability_(spec_, set, dev_index, backing),
      ordered_(spec_, set, dev_index, &epoch_),
      ctx_{.spec = spec_,
           .set = set,
           .dev = dev_index,
           .backing = backing,
           .stats = &stats_,
           .requests = &requests_,
           .backing_time = &backing_time_,
           .activity = &activity_,
           .ranges = &ranges_,
           .cache_io = &cache_io_,
           .durability = &durability_,
           .epoch = &epoch_,
           .clock = &clock_,
           .ordered = &ordered_},
      flush_(ctx_),
      read_(ctx_, &bypass_),
      write_through_(ctx_),
      dirty_write_(ctx_, &handshake_, &write_through_,
                   [this](const IoRequest& req, IoDone done, bool dirty_refused) {
                     DoWrite(req, std::move(done), dirty_refused);
                   }),
      discard_(ctx_) {
  const uint64_t newest = set_->index().NewestEpoch(dev_);
  epoch_.StartAfter(newest);
  // The epochs already dirty began no earlier than the time the backing
  // superblock promises, or than it became dirty (epoch_clock.h).
  uint64_t floor_s = 0;
  if (super_) {
    BackingSuperblock sb = super_->Get();
    if (sb.state == BackingState::kDirty) floor_s = sb.consistent_as_of ? sb.consistent_as_of : sb.dirty_since;
  }
  clock_.Start(newest, floor_s ? floor_s * 1000 : UnixMillis());
  if (super_ && set_->persistent() && !backing->read_only()) {
    writeback_ = std::make_unique<Writeback>(Writeback::Parts{.spec = spec_,
                                                              .set = set_,
                                                              .dev = dev_,
                                                              .backing = backing_,
                                                              .super = super_,
                                                              .ranges = &ranges_,
                                                              .handshake = &handshake_,
                                                              .activity = &activity_,
                                                              .backing_time = &backing_time_,
                                                              .host = this,
                                                              .durability = &durability_,
                                                              .ordered = &ordered_,
                                                              .epoch = &epoch_,
                                                              .clock = &clock_});
    // A write the gate holds runs the writeback thread at full speed.
    ordered_.SetWake([this] {
      activity_.TurnedAway(NowNanos());
      writeback_->Kick();
    });
    // Room for a write turned away for space: the cache would take a dirty
    // write again (DirtyWriteEngine::Full).
    ordered_.SetRoom([this] {
      return attached() && !fenced() && !set_->failed() &&
             set_->knobs().cache_mode.load(std::memory_order_relaxed) == CacheMode::kWriteback &&
             !dirty_write_.Full(set_->in_use_percent());
    });
    writeback_->Start();
    can_writeback_ = true;
  }
}

CachedDevice::~CachedDevice() { writeback_.reset(); }

uint64_t CachedDevice::writeback_lag_ms() {
  const uint64_t now = UnixMillis();  // before the index, as MeasureLag
  return clock_.LagMs(set_->index().OldestEpoch(dev_), now);
}

std::string CachedDevice::Describe() const {
  return backing_->Describe() + " cached on " + set_->cache_dev()->spec() + " (" +
         CacheModeName(set_->knobs().cache_mode.load()) + ")";
}

Result<uint64_t> CachedDevice::Grow() {
  const uint64_t old_size = size();
  // The backing device refuses to shrink itself; a change smaller than our
  // block leaves this size as it is.
  UB_RETURN_IF_ERROR(backing_->Grow().status());
  const uint64_t new_size = UsableSize(backing_, logical_block_size());
  if (new_size <= old_size) {
    UB_RETURN_IF_ERROR(SetGrownSize(new_size));  // names both sizes when smaller
    return old_size;
  }
  constexpr uint64_t kStep = 64 << 20;  // a bounded hold of each shard, as DropDevice
  uint64_t removed_clean = 0;
  bool any_dirty = false;
  for (uint64_t off = old_size; off < new_size; off += kStep) {
    bool has_dirty = false;
    uint64_t removed = 0;
    UB_RETURN_IF_ERROR(set_->index().InvalidateClean(dev_, off, std::min(kStep, new_size - off), &has_dirty, &removed));
    removed_clean += removed;
    any_dirty |= has_dirty;
  }
  if (any_dirty)
    UB_WARN("{}: the cache holds dirty data past the old end ({}), kept from a time the device was larger; it "
            "is served and written back", spec_, FormatSize(old_size));
  // Like a write's dropped clean copies (rule 5): their removal is durable
  // before a request can read or write the range they covered.
  if (removed_clean > 0) UB_RETURN_IF_ERROR(set_->Commit());
  UB_RETURN_IF_ERROR(SetGrownSize(new_size));
  UB_INFO("{}: grown from {} to {}", spec_, FormatSize(old_size), FormatSize(new_size));
  return new_size;
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
    MutexLock l(&fence_mu_);
    if (fenced()) return;
    fence_reason_ = why;
    fenced_.store(true, std::memory_order_release);
  }
  UB_ERROR("{}: FENCED: {}. Every request fails from now on, and its {} of dirty data is neither served "
           "nor written back; restart with --after-fence once the image's new owner is done with it",
           spec_, why, FormatSize(dirty_bytes()));
  // Writes waiting for the backing superblock go on, to fail below.
  handshake_.SetDirtyOk(false);
  ordered_.Advance(true);  // writes waiting for writeback's order go on, to fail below
  if (writeback_) writeback_->Kick();  // it records the fence
}

std::string CachedDevice::fence_reason() const {
  MutexLock l(&fence_mu_);
  return fence_reason_;
}

// RequestStats counts IoOps under their own numbers.
static_assert(RequestStats::kRead == static_cast<int>(IoOp::kRead) &&
              RequestStats::kWrite == static_cast<int>(IoOp::kWrite) &&
              RequestStats::kFlush == static_cast<int>(IoOp::kFlush) &&
              RequestStats::kDiscard == static_cast<int>(IoOp::kDiscard) &&
              RequestStats::kWriteZeroes == static_cast<int>(IoOp::kWriteZeroes));

void CachedDevice::DoSubmit(const IoRequest& req, IoDone client) {
  // One clock reading for the writeback thread's idle test and the latency.
  const uint64_t now = NowNanos();
  activity_.Request(now);
  // The hot path, a read through the cache, records itself when its last
  // piece completes (ReadEngine::PieceDone), with the clock reading that
  // piece's completion took anyway: no wrapper, no second reading. Any
  // other request is recorded by a wrapper of its completion.
  if (req.op == IoOp::kRead && !fenced() && attached()) {
    read_.Read(req, std::move(client), false, now);
    return;
  }
  IoDone done = TimeRequest(&requests_, static_cast<RequestStats::Op>(req.op), req.len, now, std::move(client));
  if (fenced()) {
    CompleteLater(std::move(done), FencedError(spec_, req.op));
    return;
  }
  switch (req.op) {
    // A read here is detached (the hot path above took the rest): the index
    // is not ours to read.
    case IoOp::kRead: backing_->Submit(req, std::move(done)); return;
    case IoOp::kWrite: {
      IoRequest write = req;
      bypass_.MarkSyncHint(&write.flags);  // once, at arrival: DoWrite may run again
      DoWrite(write, std::move(done));
      return;
    }
    case IoOp::kFlush:
      bypass_.FlushArrived();
      flush_.Flush([this, done = std::move(done)](Status st) mutable {
        bypass_.FlushAnswered();
        done(std::move(st));
      });
      return;
    case IoOp::kDiscard:
    case IoOp::kWriteZeroes:
      // Flush order with older epochs dirty: on the backing device this
      // would wait for writeback to write all of them (rule 14) — with
      // hundreds of MiB dirty over a spindle, minutes, and ext4 sends
      // them in its lazy inode-table zeroing and fstrim. A discard allows
      // its range's content to go, never requires it (NBD_CMD_TRIM; a
      // block device's discard without zeroing): answered, the data stays
      // (clean copies stay true, dirty ones are still written back). A
      // write-zeroes must read back zeros: taken as a write of zeros, so
      // the cache absorbs it in its epoch like any write (past the cutoffs
      // it goes through, and waits, as before).
      if (attached() && !set_->failed() && ordered_.WouldWait()) {
        if (req.op == IoOp::kDiscard) {
          discards_skipped_.fetch_add(1, std::memory_order_relaxed);
          CompleteLater(std::move(done), Status::OK());
          return;
        }
        if (req.len <= kZeroesAsWrite &&
            set_->knobs().cache_mode.load(std::memory_order_relaxed) == CacheMode::kWriteback) {
          zeroes_cached_.fetch_add(1, std::memory_order_relaxed);
          auto zeros = std::make_shared<AlignedBuffer>(req.len);
          std::memset(zeros->data(), 0, req.len);
          IoRequest write{IoOp::kWrite, req.flags & kIoFua, req.offset, req.len, zeros->data()};
          bypass_.MarkSyncHint(&write.flags);
          DoWrite(write, [zeros, done = std::move(done)](Status st) mutable { done(std::move(st)); });
          return;
        }
      }
      discard_.Discard(req, std::move(done));
      return;
  }
}

void CachedDevice::DoPrefetch(uint64_t offset, uint64_t len, IoDone client) {
  IoDone done = TimeRequest(&requests_, RequestStats::kCache, len, NowNanos(), std::move(client));
  if (fenced()) {
    CompleteLater(std::move(done), FencedError(spec_, IoOp::kRead));
    return;
  }
  if (!attached()) {
    CompleteLater(std::move(done), Status::OK());  // a hint, and there is no cache to fill
    return;
  }
  read_.Prefetch(offset, len, std::move(done));
}

void CachedDevice::WriteFailedCache(const IoRequest& req, IoDone done) {
  // The backing device alone; afterwards the range's extents (dirty ones
  // included: the backing device now has newer data) are dropped.
  durability_.WriteIssuing(req.offset, req.len);
  backing_->Submit(req, [this, req, done = std::move(done)](Status st) mutable {
    durability_.WriteDone();
    if (!st.ok()) {
      durability_.WriteSettled(req.offset, req.len);
      done(std::move(st));
      return;
    }
    CallIndex(
        set_, [this, req] { return set_->index().Invalidate(dev_, req.offset, req.len); },
        [this, req, done = std::move(done)](Status) mutable {
          durability_.WriteSettled(req.offset, req.len);
          done(Status::OK());
        });
  });
}

void CachedDevice::DoWrite(const IoRequest& req, IoDone done, bool dirty_refused) {
  if (fenced()) {  // a write that waited (for the backing superblock) meets it here
    CompleteLater(std::move(done), FencedError(spec_, req.op));
    return;
  }
  if (set_->failed()) {
    WriteFailedCache(req, std::move(done));
    return;
  }
  // Fills that read the backing device before this write must not insert
  // what they read: the range is marked changed now. Its clean copies stay
  // until the road the write takes needs them gone: the writeback engine's
  // insert replaces them (in place when it covers them exactly, with no
  // B-tree leaf shifted out and back), and every road to the backing device
  // removes them and commits that before its I/O (rule 5,
  // RangeGuard::BeforeBackingWrite). Dirty copies stay in either case (the
  // only copy of acknowledged data) until this write's insert replaces them
  // in one step, so no commit in between can leave the range with neither
  // the old data nor the new.
  const bool seq_bypass = !attached() || bypass_.ShouldBypass(req, true);
  Writeback* wb = writeback_.get();
  if (wb && !dirty_refused && attached() &&
      set_->knobs().cache_mode.load(std::memory_order_relaxed) == CacheMode::kWriteback &&
      dirty_write_.TakesWithoutLookup(req, seq_bypass)) {
    // The common writeback write goes dirty into the cache whether or not
    // dirty data overlaps it: the range is only marked, no leaf searched.
    Status st = set_->index().MarkWrite(dev_, req.offset, req.len, nullptr);
    if (!st.ok()) {
      CompleteLater(std::move(done), st);
      return;
    }
    if (dirty_write_.Write(req, done, /*has_dirty=*/true, wb)) return;
    // No room after all: the whole road, with the lookup.
  }
  auto has_dirty = std::make_shared<bool>(false);
  CallIndex(
      set_, [this, req, has_dirty] { return set_->index().MarkWrite(dev_, req.offset, req.len, has_dirty.get()); },
      [this, req, has_dirty, dirty_refused, seq_bypass, done = std::move(done)](Status st) mutable {
        if (!st.ok()) {
          CompleteLater(std::move(done), st);
          return;
        }
        RouteWrite(req, std::move(done), *has_dirty, dirty_refused, seq_bypass);
      });
}

bool CachedDevice::OrderMatters() const {
  const CacheKnobs& k = set_->knobs();
  return ordered_.ordered() &&
         (k.cache_mode.load(std::memory_order_relaxed) == CacheMode::kWriteback ||
          set_->buckets().dirty_buckets() > 0);
}

void CachedDevice::RouteWrite(const IoRequest& req, IoDone done, bool has_dirty, bool dirty_refused,
                              bool seq_bypass) {
  CacheMode mode = set_->knobs().cache_mode.load(std::memory_order_relaxed);
  Writeback* wb = writeback_.get();
  if (attached() && mode == CacheMode::kWriteback && wb && !(dirty_refused && !has_dirty) &&
      dirty_write_.Accepts(req, has_dirty, seq_bypass, wb) &&
      dirty_write_.Write(req, done, has_dirty, wb))
    return;
  // A write over dirty data is cached even when it goes through (bcache).
  bool bypass = !attached() || (seq_bypass && !has_dirty);
  // In the writeback path DirtyWriteEngine gave `done` back when it could not take the write.
  // Not ahead of older epochs still dirty in the cache (rule 14). A write
  // the cache turned away for space may start over once it has room again
  // (OrderedGate: sooner than its epoch, with a backlog over a spindle).
  bool room_ok = attached() && mode == CacheMode::kWriteback && wb && !dirty_refused;
  ordered_.Enter(
      [this, req, bypass, has_dirty, done = std::move(done)](OrderedGate::Verdict v) mutable {
        if (v == OrderedGate::Verdict::kRoom && !fenced()) {
          DoWrite(req, std::move(done));
          return;
        }
        if (v != OrderedGate::Verdict::kGo || fenced()) {  // it waited, and met the fence
          CompleteLater(std::move(done), FencedError(spec_, req.op));
          return;
        }
        // Rule 14: a FUA write closes its epoch, so on the backing device it
        // follows the epoch's earlier writes only once a backing flush
        // covers them (nothing to flush while the cache absorbs the writes).
        if ((req.flags & kIoFua) && OrderMatters()) {
          durability_.FlushForClient(
              [this, req, bypass, has_dirty, done = std::move(done)](Status st) mutable {
                if (!st.ok()) {
                  CompleteLater(std::move(done), st);
                  return;
                }
                write_through_.Write(req, std::move(done), bypass, has_dirty);
              });
          return;
        }
        write_through_.Write(req, std::move(done), bypass, has_dirty);
      },
      room_ok);
}

}  // namespace ubcache
