// SPDX-License-Identifier: Apache-2.0
// CachedDevice: one backing device seen through a cache set — the
// BlockDevice that the NBD and ublk frontends serve. All policy lives here.
//
// Reads: the index splits the request into hits (extents whose bucket
// generation is still current) and misses. Hits are read from the cache
// device; a failed or stale cache read goes back to the backing device.
// Misses are read from the backing device, the client gets its data, and
// then — unless the request bypasses the cache — a copy is written to the
// cache and inserted with InsertIfUnchanged, so a miss racing a write never
// inserts stale data (that is a cache_miss_collision).
//
// Writes: every write first invalidates the range in the index, so nothing
// stale can be read from the cache while it is in flight. writethrough
// writes the backing and the cache device in parallel and inserts the new
// extent once both have it, then acknowledges; writearound, none and
// bypassed writes go to the backing device only and invalidate again when
// done (killing fills of misses that read the old data meanwhile).
// writeback (a formatted backing device and cache only; otherwise it acts
// as writethrough): see WriteBack below and cache/writeback.h.
//
// Bypass: bcache's check_should_bypass — a request whose stream (see
// SequentialDetector) reaches sequential_cutoff, or the congested cutoff
// while the cache device is slow, is not inserted. With the knobs at "auto"
// (as shipped) the rules of cache/admission.h decide instead: congestion
// compares the cache device's measured service time with the backing
// device's, and streams are admitted while there is space to spare or when
// they are read again (ghost list).
//
// Detach/Attach (ctl detach / attach): while detached, reads go straight to
// the backing device without looking at the index, and writes go to the
// backing device only, invalidating their range before and after as a
// bypassed write does. Detach drops this device's extents from the index;
// Attach drops them again (a write in flight across Detach may have inserted
// one), then caching resumes. Either takes effect on the next request.
//
// Fence (a backing device another client took over: rbd:'s lock broken,
// this client blocklisted): from then on every request fails with EIO —
// reads included, since the cache's copy may be older than the new owner's
// data — and the writeback thread never writes to the backing device
// again. It records the fence in the cache superblock (CacheSet::
// RecordFence), so the next start does not write the dirty data back
// either until an operator decides (serve --after-fence).
//
// Thread safety: any reactor thread; Detach/Attach/Fence from any thread. Per-request state lives in the
// request; shared state is in thread-safe objects (index shards, bucket
// allocator, atomics); stream detection is per reactor thread.
#pragma once

#include <array>
#include <memory>

#include <mutex>
#include <vector>

#include "backend/block_device.h"
#include "cache/admission.h"
#include "cache/backing_super.h"
#include "cache/cache_set.h"
#include "cache/device_activity.h"
#include "cache/dirty_handshake.h"
#include "cache/range_guard.h"
#include "cache/request_stats.h"
#include "cache/writeback.h"
#include "cache/sequential_detector.h"
#include "cache/stats.h"
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
  uint32_t dev_index() const { return dev_; }

  CacheStats& stats() { return stats_; }
  // Every client request by operation: counts, errors, bytes, latency.
  const RequestStats& requests() const { return requests_; }
  // Requests ShouldBypass sent around the cache, by reason: a run at least
  // sequential_cutoff long, or one at least the congestion cutoff long.
  uint64_t sequential_bypasses() const { return sequential_bypasses_.load(std::memory_order_relaxed); }
  uint64_t congested_bypasses() const { return congested_bypasses_.load(std::memory_order_relaxed); }
  // The auto policies' decisions: requests bypassed because the cache
  // device was expected to be slower than the backing device; streams
  // admitted because the cache had space to spare, or because they were
  // read again after bypassing (ghost list); requests the cache could not
  // take because no space could be freed for them.
  uint64_t auto_congested_bypasses() const { return auto_congested_bypasses_.load(std::memory_order_relaxed); }
  uint64_t spare_admissions() const { return spare_admissions_.load(std::memory_order_relaxed); }
  uint64_t ghost_admissions() const { return ghost_admissions_.load(std::memory_order_relaxed); }
  uint64_t cache_full_bypasses() const { return cache_full_bypasses_.load(std::memory_order_relaxed); }
  // Writeback-mode writes written through because the cache in use had
  // passed cutoff_writeback (cutoff_writeback_sync for FUA writes).
  uint64_t cutoff_writethroughs() const { return cutoff_writethroughs_.load(std::memory_order_relaxed); }
  // What the backing device's reads and writes take, as this device sends them.
  const ServiceTime& backing_time() const { return backing_time_; }
  Status Detach() override;
  Status Attach();
  // The backing device is no longer ours (see the top); `why` says how.
  void Fence(const std::string& why);
  bool fenced() const override { return fenced_.load(std::memory_order_acquire); }
  std::string fence_reason() const override;
  bool attached() const override { return attached_.load(std::memory_order_acquire); }
  CacheSet* set() const { return set_; }
  BlockDevice* backing() const { return backing_; }

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override;
  // Reads the range through the cache in 1 MiB steps, one after another, so
  // a huge NBD_CMD_CACHE costs bounded memory; counted as cache_readaheads.
  void DoPrefetch(uint64_t offset, uint64_t len, IoDone done) override;

 private:
  struct ReadOp;
  struct WriteOp;
  struct Timed;
  // `around_cache`, when given, is set when the reason is auto congestion:
  // the cache device is expected to be slower than the backing device for
  // this request, so even its clean hits are better read from the backing.
  bool ShouldBypass(const IoRequest& req, bool write, bool* around_cache = nullptr);
  // `done`, wrapped so that its call records the request in requests_
  // (`start_ns`: when it entered, on the NowNanos() clock).
  IoDone Timing(RequestStats::Op op, uint64_t len, uint64_t start_ns, IoDone done);
  // sequential_cutoff auto: whether a stream's request is cached anyway.
  bool AdmitStream(const IoRequest& req, uint64_t now_ns);
  // `start_ns`: a client read's entry, to record it in requests_ when it
  // completes; 0 for a prefetch step, or when `done` records it.
  void DoRead(const IoRequest& req, IoDone done, bool prefetch = false, uint64_t start_ns = 0);
  // `dropped_clean`: an earlier pass of this write (one that waited for the
  // backing superblock) already invalidated clean extents of the range.
  // `dirty_refused`: this write waited for the backing superblock to be
  // marked dirty, and that failed: it goes through, not into writeback
  // (else it would wait again, for as long as the backing device is out).
  void DoWrite(const IoRequest& req, IoDone done, bool dropped_clean = false, bool dirty_refused = false);
  // The writethrough/writearound/bypass write, after the range's clean
  // extents were invalidated (`has_dirty`: dirty ones are still there;
  // `dropped_clean`: some clean ones were removed, a removal the journal
  // must hold before the backing device gets the new data).
  void WriteThrough(const IoRequest& req, IoDone done, bool bypass, bool has_dirty, bool dropped_clean);
  // The writeback write: data to the cache only, inserted dirty; false when
  // it cannot be taken (no space): the caller writes through instead.
  bool WriteBack(const IoRequest& req, IoDone& done, bool has_dirty, bool dropped_clean);
  bool ShouldWriteback(const IoRequest& req, bool overlaps_dirty, bool bypass);
  // ShouldWriteback's "no" for a write the cache in use (dirty + metadata)
  // turned away: counts it and speeds writeback up. Always false.
  bool WriteThroughAtCutoff();
  // A client write (or discard) reached the backing device: the next FLUSH
  // flushes it. Called before that write is acknowledged.
  void BackingWriteDone() { backing_writes_.fetch_add(1, std::memory_order_seq_cst); }
  // A client write's cache copy at e (its data at `data`): done(ok).
  void WriteCache(const Extent& e, const uint8_t* data, Callback<void(bool)> done);
  // Acknowledges `done` with `st`, after a commit when `commit`.
  void Finish(IoDone done, Status st, bool commit);
  void DoFlush(IoDone done);
  void DoDiscard(const IoRequest& req, IoDone done);
  void DiscardDone(const IoRequest& req, bool has_dirty, Status st, IoDone done);
  // Copies [start, start+len) of `data` into the cache and inserts it if
  // the range has not changed since `since`.
  void Fill(uint64_t start, uint64_t len, const uint8_t* data, uint64_t since);
  void ReadBacking(ReadOp* op, uint64_t start, uint64_t len, bool was_hit);
  // `now_ns`: a clock reading the caller took at the piece's completion
  // (0: none; read here if this was the last piece).
  void PieceDone(ReadOp* op, Status st, uint64_t now_ns = 0);
  // Invalidates this device's whole range, a bounded step at a time so no
  // index shard is held for long.
  Status DropExtents();

  CacheSet* set_;
  uint32_t dev_;
  BlockDevice* backing_;
  CacheStats stats_;
  RequestStats requests_;
  std::atomic<uint64_t> sequential_bypasses_{0};
  std::atomic<uint64_t> congested_bypasses_{0};
  std::atomic<uint64_t> auto_congested_bypasses_{0};
  std::atomic<uint64_t> spare_admissions_{0};
  std::atomic<uint64_t> ghost_admissions_{0};
  std::atomic<uint64_t> cache_full_bypasses_{0};
  std::atomic<uint64_t> cutoff_writethroughs_{0};
  // Client writes that reached the backing device, and how many of them the
  // last completed backing flush covered (DoFlush). Starts one apart: the
  // first FLUSH also covers what an earlier daemon left in the backing
  // device's volatile cache.
  std::atomic<uint64_t> backing_writes_{1};
  std::atomic<uint64_t> backing_flushed_{0};
  ServiceTime backing_time_;
  std::atomic<bool> attached_{true};
  // One detector for the device, as bcache's per-cached_dev one: a client
  // with several connections (nbdfuse, qemu, the kernel's nbd -C) spreads one
  // stream over several reactors, and per-reactor detectors each saw only
  // gaps in it.
  Mutex detector_mu_;
  SequentialDetector detector_ GUARDED_BY(detector_mu_);
  GhostList ghosts_ GUARDED_BY(detector_mu_);
  BackingSuper* const super_;
  DeviceActivity activity_;
  // The backing superblock's clean <-> dirty handshake with the writeback thread.
  DirtyHandshake handshake_;
  RangeGuard ranges_;
  bool can_writeback_ = false;
  std::atomic<bool> fenced_{false};
  mutable std::mutex fence_mu_;
  std::string fence_reason_;  // under fence_mu_
  std::unique_ptr<Writeback> writeback_;  // last: stopped before the rest goes
};

}  // namespace ubcache
