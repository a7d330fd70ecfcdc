// SPDX-License-Identifier: Apache-2.0
// CachedDevice: one backing device seen through a cache set — the
// BlockDevice that the NBD and ublk frontends serve. It routes each request
// to the engine for its kind, each in its own file:
//   reads and NBD_CMD_CACHE   ReadEngine          (hit, miss + fill, bypass)
//   writes                    DirtyWriteEngine    (writeback mode: to the
//                                                  cache only, dirty)
//                             WriteThroughEngine  (writethrough, writearound,
//                                                  none, bypassed, detached)
//   discard, write-zeroes     DiscardEngine
//   flush                     FlushEngine
// over shared pieces with one job each (cache/engine_context.h): RangeGuard,
// DirtyHandshake, CacheIo, BypassPolicy, DeviceActivity, BackingDurability. The background
// writeback thread (cache/writeback.h) reaches the device only through those
// pieces and the WritebackHost interface.
//
// Writes (DoWrite, the router): every write first marks its range changed
// (ExtentIndex::MarkWrite), so no fill that read the backing device before
// it inserts what it read; clean copies stay until the write's insert
// replaces them, or until a write that goes to the backing device removes
// them before its I/O (rule 5); dirty copies stay until the write's own
// insert replaces them. It then goes to DirtyWriteEngine when the mode is
// writeback (a formatted backing device and cache only; otherwise it acts
// as writethrough) and bcache's should_writeback says so, else to
// WriteThroughEngine. Whether dirty data overlaps the write is looked up
// with the mark only when the road depends on it: a writeback write below
// the cutoffs and not bypassed goes dirty into the cache either way
// (DirtyWriteEngine::TakesWithoutLookup), so its range is only marked.
//
// Detach/Attach (ctl detach / attach): while detached, reads go straight to
// the backing device without looking at the index, and writes go to the
// backing device only, invalidating their range before and after as a
// bypassed write does. Detach drops this device's extents from the index;
// Attach drops them again (a write in flight across Detach may have inserted
// one), then caching resumes. Either takes effect on the next request.
//
// Grow (ctl resize, an rbd: image resized by its owner): the backing device
// grows first, then the range between the old and the new end loses any
// clean copy the index still holds for it (left from a time the device was
// that large: not what the backing device holds now), that removal is
// committed, and only then does this device take the new size — so no
// request reaches the new range before it reads the backing device's data.
// Nothing else in the cache keeps the size: the index is keyed by offset,
// the engines take each request as Validate passed it, the writeback thread
// reads the size (WritebackHost::client_size) each pass to end its runs, and
// stream detection and the statistics count requests.
//
// Fence (a backing device another client took over: rbd:'s lock broken,
// this client blocklisted): from then on every request fails with EIO —
// reads included, since the cache's copy may be older than the new owner's
// data — and the writeback thread never writes to the backing device
// again. It records the fence in the cache superblock (CacheSet::
// RecordFence), so the next start does not write the dirty data back
// either until an operator decides (serve --after-fence).
//
// Thread safety: requests from any reactor thread; Detach/Attach/Fence from
// any thread. Per-request state lives in the request (on the engine that
// runs it); shared state is in thread-safe objects (index shards, bucket
// allocator, the pieces above, atomics). fence_mu_ is a leaf lock.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "backend/block_device.h"
#include "cache/backing_durability.h"
#include "cache/backing_super.h"
#include "cache/bypass_policy.h"
#include "cache/cache_io.h"
#include "cache/cache_set.h"
#include "cache/device_activity.h"
#include "cache/dirty_handshake.h"
#include "cache/dirty_write_engine.h"
#include "cache/discard_engine.h"
#include "cache/ordered_gate.h"
#include "cache/engine_context.h"
#include "cache/epoch_clock.h"
#include "cache/flush_engine.h"
#include "cache/range_guard.h"
#include "cache/read_engine.h"
#include "cache/request_stats.h"
#include "cache/service_time.h"
#include "cache/stats.h"
#include "cache/writeback.h"
#include "cache/writethrough_engine.h"
#include "util/thread_annotations.h"

namespace ubcache {

class CachedDevice final : public BlockDevice, public WritebackHost {
 public:
  // Client byte N is byte N of `backing` (an OffsetDevice past a superblock).
  // `super`: the backing device's superblock, when it is formatted; with a
  // formatted cache it enables writeback (a thread per device).
  CachedDevice(std::string spec, CacheSet* set, uint32_t dev_index, BlockDevice* backing,
               BackingSuper* super = nullptr);
  ~CachedDevice() override;
  std::string Describe() const override;
  // Writeback needs somewhere durable to keep dirty data and its state:
  // a formatted cache and a formatted backing device.
  bool can_writeback() const { return can_writeback_; }
  Writeback* writeback() { return writeback_.get(); }
  // Before the cache set's Shutdown: no writeback I/O may run under it.
  void StopWriteback() { writeback_.reset(); }
  uint64_t dirty_bytes() { return set_->index().DirtyBytes(dev_); }
  // Issue 30 item 3: milliseconds since the oldest epoch not yet on the
  // backing device began (0: nothing dirty; cache/epoch_clock.h), and how
  // many epochs still hold dirty data or kept versions.
  uint64_t writeback_lag_ms();
  uint64_t dirty_epochs() { return set_->index().DirtyEpochs(dev_); }
  uint32_t dev_index() const { return dev_; }

  CacheStats& stats() { return stats_; }
  // Every client request by operation: counts, errors, bytes, latency.
  const RequestStats& requests() const { return requests_; }
  // Requests BypassPolicy sent around the cache, by reason: a run at least
  // sequential_cutoff long, or one at least the congestion cutoff long.
  uint64_t sequential_bypasses() const { return bypass_.sequential_bypasses(); }
  uint64_t congested_bypasses() const { return bypass_.congested_bypasses(); }
  // The same requests by what they were: reads, writes, FUA writes, writes
  // after a FLUSH (BypassPolicy's sync hint).
  uint64_t bypasses(BypassPolicy::Kind kind) const { return bypass_.bypasses(kind); }
  // The auto policies' decisions: requests bypassed because the cache
  // device was expected to be slower than the backing device; streams
  // admitted because the cache had space to spare, or because they were
  // read again after bypassing (ghost list); requests the cache could not
  // take because no space could be freed for them.
  uint64_t auto_congested_bypasses() const { return bypass_.auto_congested_bypasses(); }
  uint64_t spare_admissions() const { return bypass_.spare_admissions(); }
  uint64_t ghost_admissions() const { return bypass_.ghost_admissions(); }
  uint64_t cache_full_bypasses() const { return cache_io_.cache_full_bypasses(); }
  // Writeback-mode writes written through because the cache in use had
  // passed cutoff_writeback (cutoff_writeback_sync for FUA writes).
  uint64_t cutoff_writethroughs() const { return dirty_write_.cutoff_writethroughs(); }
  // Writes and discards that waited for writeback to reach their epoch
  // before going to the backing device (rule 14, cache/ordered_gate.h).
  uint64_t ordered_waits() const { return ordered_.waits(); }
  uint64_t ordered_wait_us() const { return ordered_.wait_us(); }
  uint64_t ordered_room_retries() const { return ordered_.room_retries(); }
  uint64_t order_suspensions() const { return ordered_.suspensions(); }
  bool order_suspended() const { return ordered_.suspended(); }
  // Flush order, older epochs dirty (a backing discard or write-zeroes
  // would wait for all of them — minutes over a spindle): discards answered
  // without reaching the backing device, and write-zeroes of at most
  // kZeroesAsWrite taken by the cache as writes of zeros (DoSubmit).
  uint64_t discards_skipped() const { return discards_skipped_.load(std::memory_order_relaxed); }
  uint64_t zeroes_cached() const { return zeroes_cached_.load(std::memory_order_relaxed); }
  static constexpr uint64_t kZeroesAsWrite = 4 << 20;
  // What the backing device's reads and writes take, as this device sends them.
  const ServiceTime& backing_time() const { return backing_time_; }
  // See the top. Refuses a backing device that shrank (nothing changes).
  Result<uint64_t> Grow() override;
  Status Detach() override;
  Status Attach();
  // The backing device is no longer ours (see the top); `why` says how.
  void Fence(const std::string& why);
  bool fenced() const override { return fenced_.load(std::memory_order_acquire); }
  std::string fence_reason() const override;
  bool attached() const override { return attached_.load(std::memory_order_acquire); }
  uint64_t client_size() const override { return size(); }
  CacheSet* set() const { return set_; }
  BlockDevice* backing() const { return backing_; }

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override;
  void DoPrefetch(uint64_t offset, uint64_t len, IoDone done) override;

 private:
  // The write router (see the top). `dirty_refused`: this write
  // waited for the backing superblock to be marked dirty, and that failed:
  // it goes through, not into writeback (else it would wait again, for as
  // long as the backing device is out).
  void DoWrite(const IoRequest& req, IoDone done, bool dirty_refused = false);
  // DoWrite's second half, once the range is marked changed: to the engine.
  // writeback_order flush, and the device's writes can meet dirty data
  // (writeback mode, or dirty data left from before a switch): rule 14.
  bool OrderMatters() const;
  // `seq_bypass`: BypassPolicy's answer, asked once per DoWrite (it feeds
  // the stream detector).
  void RouteWrite(const IoRequest& req, IoDone done, bool has_dirty, bool dirty_refused,
                  bool seq_bypass);
  // The set failed: the backing device alone, then the range's extents go.
  void WriteFailedCache(const IoRequest& req, IoDone done);
  // Invalidates this device's whole range, a bounded step at a time so no
  // index shard is held for long.
  Status DropExtents();

  CacheSet* set_;
  uint32_t dev_;
  BlockDevice* backing_;
  CacheStats stats_;
  RequestStats requests_;
  ServiceTime backing_time_;
  std::atomic<bool> attached_{true};
  BackingSuper* const super_;
  DeviceActivity activity_;
  // Starts past every epoch the index holds for the device (write_epoch.h).
  WriteEpoch epoch_;
  EpochClock clock_;
  // The backing superblock's clean <-> dirty handshake with the writeback thread.
  DirtyHandshake handshake_;
  RangeGuard ranges_;
  CacheIo cache_io_;
  BypassPolicy bypass_;
  BackingDurability durability_;
  OrderedGate ordered_;
  EngineContext ctx_;
  FlushEngine flush_;
  ReadEngine read_;
  WriteThroughEngine write_through_;
  DirtyWriteEngine dirty_write_;
  DiscardEngine discard_;
  bool can_writeback_ = false;
  std::atomic<uint64_t> discards_skipped_{0}, zeroes_cached_{0};
  std::atomic<bool> fenced_{false};
  mutable Mutex fence_mu_;
  std::string fence_reason_ GUARDED_BY(fence_mu_);
  std::unique_ptr<Writeback> writeback_;  // last: stopped before the rest goes
};

}  // namespace ubcache
