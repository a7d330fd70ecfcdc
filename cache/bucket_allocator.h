// SPDX-License-Identifier: Apache-2.0
// BucketAllocator: the cache device's space, in buckets (512 KiB by
// default), as bcache manages it (alloc.c).
//
// Every bucket has an 8-bit generation. An extent in the index records the
// generation of the bucket it was written to; reusing a bucket bumps the
// generation, which makes every old pointer into it stale at once, with no
// index walk (a stale pointer is a miss and reads go to the backing device).
// Before a bucket's generation may wrap past pointers still in the index,
// GC must have dropped them: Reclaim() refuses buckets whose generation ran
// kMaxGenLead ahead of the last GC.
//
// Data is appended to an open bucket per writer (one per reactor thread, so
// writers never share a fill pointer); Allocate() hands out the next run of
// bytes. Priorities follow bcache: a bucket's priority is set high when it
// is filled or hit and decays over time; with the lru policy the lowest
// priority buckets are reclaimed first, with fifo the oldest filled, with
// random any. A reserve of buckets is kept for metadata (btree nodes).
//
// Reclaim is incremental, as bcache's allocator thread keeps a free FIFO
// filled: a background thread (StartRefill) tops the free list up to
// free_target() before it runs dry, scanning the buckets kScanChunk at a
// time with mu_ taken per chunk. A foreground Allocate() that still finds
// the free list empty reclaims from a window of at most kScanChunk buckets
// (an approximation of the policy), so no request waits on a scan of the
// whole cache. Every other whole-cache pass (priority decay, GC's
// generation snapshot and bookkeeping) also holds mu_ one chunk at a time.
//
// GC (CacheSet::RunGc) reports each bucket's live bytes (SetLiveBytes);
// reclaim takes buckets GC found empty before any others.
//
// Durable generations (bcache's prio/gen write, alloc.c: a bucket's new gen
// must be on disk before the bucket is reused, "otherwise after a crash"
// a pointer into it would look valid). With a gen persister set
// (SetGenPersister, the cache set's journal), a reclaimed bucket waits on a
// pending list until its new generation is durable, and only then joins
// the free list; the only way onto the free list is reclaim. A serving
// reactor (util/thread.h) neither journals generations nor waits for
// another thread's journaling: its Allocate() that finds no free bucket
// reclaims into the pending list (CPU only), wakes the refill thread to
// journal them, and returns WouldBlock; the caller may ParkForSpace() and
// is called back on its reactor when the journaling is done. A freed
// metadata bucket becomes an empty data bucket (reclaimed like any other).
// Dirty data: a bucket with dirty bytes (AddDirty, from the index's dirty
// accounting) is never reclaimed.
//
// Thread safety: changes take mu_. The read-hit path takes no lock: each
// bucket's (gen, kind, prio) is also published in one atomic word, so
// Valid() is a load and Touch() locks only when the priority has decayed.
// The counts by kind and an exact histogram of data-bucket priorities are
// kept incrementally in atomics (written under mu_), so usage() and
// priority_stats() never take mu_ and never scan the buckets: a statistics
// poller cannot stall I/O (the lesson of bcache's priority_stats, which
// sorted every bucket's priority under the bucket lock). A reader racing a
// change may see the counts one step apart; they are statistics.
//
// Lock order: mu_, then wake_mu_ (a leaf: an allocation that runs the free
// list low wakes the refill thread under mu_). mu_ is never held while the
// gen persister runs (it takes the cache set's journal locks): the persist
// drops it. Callers may hold the node store's slot-map lock
// (BucketNodeStore::AllocNode) or an index shard lock (AddDirty takes none).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "backend/reactor.h"
#include "cache/knobs.h"
#include "util/callback.h"
#include "util/clock.h"
#include "util/status.h"
#include "util/thread_annotations.h"

namespace ubcache {

class BucketAllocator {
 public:
  static constexpr uint8_t kMaxGenLead = 96;  // bcache's BUCKET_GC_GEN_MAX
  static constexpr uint16_t kInitialPrio = 32768;
  // One histogram bin per priority value: priorities never exceed kInitialPrio.
  static constexpr unsigned kPrioBins = kInitialPrio + 1;
  static constexpr unsigned kQuantiles = 31;  // as bcache's priority_stats
  // Buckets visited per hold of mu_ by any pass over the buckets.
  static constexpr uint32_t kScanChunk = 4096;

  enum class Kind : uint8_t { kFree, kData, kMetadata, kReserved };

  struct Options {
    uint64_t bucket_size = 512 << 10;
    uint32_t first_bucket = 0;  // buckets below this hold superblock/journal
    uint32_t nbuckets = 0;      // total, including the ones below first_bucket
    uint32_t metadata_reserve = 8;
    unsigned writers = 1;       // open buckets (one per reactor)
  };

  struct Space {
    uint64_t cache_offset;  // bytes on the cache device
    uint8_t gen;
    uint32_t bucket;
  };

  explicit BucketAllocator(Options o);
  ~BucketAllocator();  // stops the refill thread

  // `len` bytes (<= bucket size) of data space for writer `w`; NoSpace
  // when every bucket is in use and none can be reclaimed. On a serving
  // reactor, WouldBlock when reclaimed buckets wait for their generations
  // to be journaled (see the top).
  Result<Space> Allocate(unsigned w, uint64_t len, ReplacementPolicy policy) EXCLUDES(mu_);
  // After Allocate's WouldBlock, on a reactor thread: false when a bucket is
  // free by now (allocate again at once); else true, and fn runs on this
  // reactor once the refill thread's next journaling of generations (or
  // its refill that found nothing to journal) is done — `space` says
  // whether a bucket is free then.
  // fn is taken only when parked (true).
  // The wake rule: every Refill() ends by waking the parked allocations —
  // itself, or through the persist it runs, or the one already running
  // (which wakes them whether it succeeded or failed) — and the refill
  // thread runs Refill at least once a second, so a parked allocation waits
  // about a second at most, never for a bucket nobody will free. Woken
  // without space, a write goes through unless it overlaps dirty data (then
  // it may park again, while reclaim progresses).
  bool ParkForSpace(Callback<void(bool space)>&& fn) EXCLUDES(mu_);
  // Every Allocate() is followed by exactly one WriteDone(space.bucket)
  // once the write of that space has completed (or failed). A bucket with
  // writes in flight is never reclaimed: a late write must not land on data
  // the bucket's next owner wrote.
  // Writeback reading a bucket's dirty data: the same count, so the bucket
  // stays put until the matching WriteDone.
  void Pin(uint32_t bucket) { inflight_[bucket].fetch_add(1, std::memory_order_acq_rel); }
  void WriteDone(uint32_t bucket) {
    inflight_[bucket].fetch_sub(1, std::memory_order_release);
  }
  // Makes the generations of reclaimed buckets durable before they are
  // handed out; called without mu_ held, from the refill thread or (when
  // the free list runs dry) from an allocating thread.
  using GenPersister = std::function<Status(const std::vector<std::pair<uint32_t, uint8_t>>&)>;
  void SetGenPersister(GenPersister fn) EXCLUDES(mu_);
  // Recovery: the journal's durable generations, after RestoreState. Each
  // named bucket becomes an empty, reclaimable data bucket with that gen.
  void ApplyGens(const std::vector<std::pair<uint32_t, uint8_t>>& gens) EXCLUDES(mu_);
  // Dirty bytes held by a bucket (the index's accounting): such a bucket is
  // never reclaimed.
  void AddDirty(uint32_t bucket, int64_t delta);
  uint64_t dirty_buckets() const { return dirty_buckets_.load(std::memory_order_relaxed); }
  // A whole bucket for metadata, from the reserve if need be.
  Result<Space> AllocateMetadata() EXCLUDES(mu_);
  void FreeMetadata(uint32_t bucket) EXCLUDES(mu_);

  // A read hit: LRU priority goes back up.
  void Touch(uint32_t bucket) EXCLUDES(mu_);
  // Is a pointer with generation `gen` into the bucket at `cache_offset` still valid?
  bool Valid(uint64_t cache_offset, uint8_t gen) const EXCLUDES(mu_);
  uint32_t BucketOf(uint64_t cache_offset) const { return static_cast<uint32_t>(cache_offset / o_.bucket_size); }
  // Ages every priority by one step (bcache's prio rescale); call periodically.
  void DecayPriorities() EXCLUDES(mu_);
  // GC has dropped every stale pointer: generations may run ahead again.
  void MarkGcDone() EXCLUDES(mu_);
  // The same, for a GC that started when the generations were `at_start`
  // (GenSnapshot()): pointers made during the pass carry gens >= those.
  void MarkGcDone(const std::vector<uint8_t>& at_start) EXCLUDES(mu_);
  std::vector<uint8_t> GenSnapshot() const EXCLUDES(mu_);
  // The largest gen - gc_gen over all buckets: how urgently GC is needed.
  uint8_t MaxGenLead() const EXCLUDES(mu_);

  // GC's count of live bytes per bucket (indexed by bucket), taken by a pass
  // that started when fill_seq() was `seq_at_start`: buckets filled before
  // then with no live bytes are reclaimed first. Swapped in, O(1) under mu_.
  void SetLiveBytes(std::vector<uint32_t> live, uint64_t seq_at_start) EXCLUDES(mu_);
  uint64_t fill_seq() const EXCLUDES(mu_);
  // Moving GC: up to `max` full data buckets holding some but less than
  // `below` live bytes (by `live`, GC's count), fewest first, each pinned
  // (as Pin) so none is reclaimed while its data is copied out; the caller
  // unpins each with WriteDone.
  std::vector<uint32_t> PinFragmented(const std::vector<uint32_t>& live, uint32_t below, size_t max)
      EXCLUDES(mu_);

  // Background reclaim. Refill() tops the free list up to free_target()
  // with the policy's best victims, a chunk at a time; returns how many
  // buckets it reclaimed. StartRefill() runs it on a thread of its own,
  // woken when the free list drops below half the target (and once a
  // second); the destructor stops it.
  size_t Refill(ReplacementPolicy policy) EXCLUDES(mu_);
  void StartRefill(std::function<ReplacementPolicy()> policy);
  void StopRefill() EXCLUDES(wake_mu_);
  uint32_t free_target() const { return free_target_; }

  // Lock-free, O(1). `dead`: data buckets the last GC pass found holding
  // nothing live (reclaim takes them first, and reusing them drops no
  // cached data), not yet reclaimed.
  struct Usage {
    uint64_t buckets, free, data, metadata, reserved;
    uint64_t reclaimed_background, reclaimed_foreground;  // buckets, since start
    uint64_t dead;
  };
  Usage usage() const;
  // Data buckets by priority (index = priority). Lock-free, O(kPrioBins).
  std::vector<uint64_t> prio_histogram() const;
  // bcache's priority_stats: percentages of all buckets, and the average and
  // kQuantiles quantiles of data buckets' age (kInitialPrio - priority), in
  // ascending order. No dirty buckets until writeback exists. Lock-free,
  // O(kPrioBins).
  struct PriorityStats {
    unsigned unused_percent, clean_percent, dirty_percent, metadata_percent;
    uint64_t average;
    uint64_t bytes_per_quantile;
    uint16_t quantiles[kQuantiles];
  };
  PriorityStats priority_stats() const;
  const Options& options() const { return o_; }

  // What a checkpoint saves per bucket (the bucket table, see
  // cache/bucket_table.h) and a start restores. Open buckets are not kept:
  // after a restore no writer appends to a bucket filled before. A free (or
  // pending) bucket is saved as an empty data bucket: a crash may find data
  // written into it after the save, under the gen the table holds, so it
  // must be reclaimed (its gen bumped durably) before reuse.
  struct BucketState {
    uint8_t gen = 0;
    uint8_t gc_gen = 0;
    Kind kind = Kind::kFree;
    uint16_t prio = 0;
  };
  std::vector<BucketState> ExportState() const EXCLUDES(mu_);
  // Replaces every bucket's state; only on an allocator nothing has used
  // yet, before StartRefill. InvalidArgument when the count or a reserved bucket disagrees with
  // the geometry.
  Status RestoreState(const std::vector<BucketState>& state) EXCLUDES(mu_);

 private:
  struct Bucket {
    uint8_t gen = 0;
    uint8_t gc_gen = 0;  // gen at the last GC
    Kind kind = Kind::kFree;
    uint16_t prio = 0;
    uint64_t filled_seq = 0;  // for fifo
    bool open = false;        // a writer is filling it
  };
  struct Writer {
    uint32_t bucket = UINT32_MAX;
    uint64_t fill = 0;
  };

  Result<uint32_t> TakeFreeLocked(bool metadata, ReplacementPolicy policy) REQUIRES(mu_);
  // Foreground: reclaims the best victim of the next window of buckets.
  bool ReclaimWindowLocked(ReplacementPolicy policy) REQUIRES(mu_);
  // Can bucket b be reclaimed now, and at what cost (lower goes first)?
  bool ReclaimableLocked(uint32_t b) const REQUIRES(mu_);
  uint64_t VictimKeyLocked(uint32_t b, ReplacementPolicy policy) const REQUIRES(mu_);
  void InvalidateLocked(uint32_t b) REQUIRES(mu_);
  // A bucket's gen moved ahead of its gc_gen: track the largest lead.
  void NoteLeadLocked(const Bucket& k) REQUIRES(mu_);
  void WantRefill() EXCLUDES(wake_mu_);
  void RefillLoop(std::function<ReplacementPolicy()> policy) EXCLUDES(wake_mu_);
  void SetPrioLocked(uint32_t b, uint16_t prio) REQUIRES(mu_);
  // Mirrors bucket b's gen, kind and prio into published_ after a change.
  void PublishLocked(uint32_t b) REQUIRES(mu_);
  static uint32_t Pack(const Bucket& k) {
    return uint32_t{k.gen} | uint32_t{static_cast<uint8_t>(k.kind)} << 8 | uint32_t{k.prio} << 16;
  }

  const Options o_;
  mutable Mutex mu_;
  std::vector<Bucket> buckets_ GUARDED_BY(mu_);
  std::unique_ptr<std::atomic<uint32_t>[]> published_;  // Pack(bucket), read without mu_
  std::unique_ptr<std::atomic<uint32_t>[]> inflight_;   // Allocate()s not yet WriteDone()
  // When each bucket was last filled or hit, in UsedTick()s: lru's order
  // among buckets of one priority. Lock-free: Touch() runs on every hit.
  std::unique_ptr<std::atomic<uint32_t>[]> used_;
  // A coarse clock (2^24 ns, ~17 ms; 32 bits wrap after ~2 years).
  static uint32_t UsedTick() { return static_cast<uint32_t>(NowNanos() >> 24); }
  std::vector<uint32_t> free_ GUARDED_BY(mu_);
  // Reclaimed, gen bumped, waiting for the gen to be durable.
  std::vector<uint32_t> pending_ GUARDED_BY(mu_);
  GenPersister persist_gens_ GUARDED_BY(mu_);
  bool persisting_ GUARDED_BY(mu_) = false;  // one persist at a time
  // Moves pending_ to free_ once their gens are durable; drops mu_ for the I/O.
  bool PersistPendingLocked() REQUIRES(mu_);
  void WaitForPersistLocked() REQUIRES(mu_);  // drops mu_ while it waits
  // Allocations parked by ParkForSpace, each for its own reactor.
  struct SpaceWaiter {
    Reactor* reactor;
    Callback<void(bool)> fn;
  };
  std::vector<SpaceWaiter> space_waiters_ GUARDED_BY(mu_);
  void WakeSpaceWaitersLocked() REQUIRES(mu_);
  uint64_t no_space_logged_ns_ GUARDED_BY(mu_) = 0;
  std::unique_ptr<std::atomic<uint32_t>[]> dirty_;  // bytes per bucket
  std::atomic<uint64_t> dirty_buckets_{0};
  std::vector<Writer> writers_ GUARDED_BY(mu_);
  uint64_t fill_seq_ GUARDED_BY(mu_) = 0;
  uint8_t max_lead_ GUARDED_BY(mu_) = 0;  // max of gen - gc_gen, kept as gens move
  // While a chunked MarkGcDone pass runs, the largest lead made by bumps.
  bool gc_pass_ GUARDED_BY(mu_) = false;
  uint8_t gc_pass_lead_ GUARDED_BY(mu_) = 0;
  std::vector<uint32_t> live_ GUARDED_BY(mu_);  // from the last GC, or empty
  uint64_t live_seq_ GUARDED_BY(mu_) = 0;
  // Bucket b is a data bucket GC found empty: VictimKeyLocked's 0, and one
  // of dead_ (counted by SetLiveBytes, dropped as each is reclaimed).
  bool DeadLocked(uint32_t b) const REQUIRES(mu_) {
    return buckets_[b].kind == Kind::kData && b < live_.size() && live_[b] == 0 &&
           buckets_[b].filled_seq < live_seq_;
  }
  std::atomic<uint64_t> dead_{0};
  uint32_t dead_counted_ GUARDED_BY(mu_) = 0;  // buckets below it are in dead_
  uint32_t cursor_ GUARDED_BY(mu_) = 0;  // next window of the foreground reclaim
  uint64_t salt_ GUARDED_BY(mu_) = 0;    // the random policy's order
  // Statistics: written under mu_, read without it.
  std::atomic<uint64_t> reclaimed_bg_{0};
  std::atomic<uint64_t> reclaimed_fg_{0};
  uint32_t free_target_ = 0;

  // The refill thread and its wake-up.
  std::atomic<bool> refill_wanted_{false};
  Mutex wake_mu_;
  CondVar wake_cv_;
  bool stop_ GUARDED_BY(wake_mu_) = false;
  std::thread refill_;
  void CountKind(Kind k, int delta) {
    counts_[static_cast<int>(k)].fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed);
  }
  void CountPrio(uint16_t prio, int delta) {
    prio_hist_[prio].fetch_add(static_cast<uint32_t>(delta), std::memory_order_relaxed);
    prio_group_[prio / kPrioGroup].fetch_add(static_cast<uint32_t>(delta), std::memory_order_relaxed);
  }
  void ClearPrio() {
    for (unsigned p = 0; p < kPrioBins; p++) prio_hist_[p].store(0, std::memory_order_relaxed);
    for (auto& g : prio_group_) g.store(0, std::memory_order_relaxed);
  }
  // The histogram's bins summed kPrioGroup at a time: a reader scans these
  // (1 KiB) and only the fine bins of nonzero groups, since data buckets
  // cluster near kInitialPrio. Reading all 128 KiB of bins 100 times a
  // second measurably slowed I/O (bench/ctl_stall.sh: IOPS x0.74).
  static constexpr unsigned kPrioGroup = 128;
  std::atomic<uint32_t> prio_group_[kPrioBins / kPrioGroup + 1] = {};
  std::atomic<uint64_t> counts_[4] = {};
  std::unique_ptr<std::atomic<uint32_t>[]> prio_hist_;  // kPrioBins
  std::mt19937_64 rng_ GUARDED_BY(mu_){42};
};

}  // namespace ubcache
