// SPDX-License-Identifier: Apache-2.0
// CacheSet: one cache device and what is shared by every backing device in
// front of which it sits — the buckets, the extent index, the congestion
// score, the knobs of the set and a housekeeping thread.
//
// Two ways to get one:
//  - Create: an unformatted cache device. The index lives in memory
//    (MemNodeStore): valid for one daemon run, and every start is cold. It
//    keeps no journal (nothing would replay it), so its memory is bounded
//    by the index itself, however long the daemon writes.
//  - Open: a formatted cache device (its superblock). The index lives on the
//    device (BucketNodeStore: nodes in metadata buckets; the Journal in the
//    journal buckets). Every start — after a clean Shutdown(), kill -9, a
//    crash or a power cut — recovers: it reads the superblock (index root,
//    and which half of the journal area is live), that journal's first
//    record (the bucket table of the last checkpoint), each shard's root
//    node, and replays the journal (bucket generations, then index entries)
//    — no index walk. Only a damaged root or table starts cold.
//
// Durability (doc/design.md "Durability" has the whole argument):
//  - Commit()/CommitAsync(): every index change made before the call is
//    durable when it completes; the journal append flushes the cache device
//    first, so the data of every extent it records is on media before it.
//    CommitAsync(soft) only writes the entry (a writeback write's ack): it
//    survives a crash of the daemon at once and a power cut from the next
//    hard commit, at most journal_delay_ms later (JournalLoop).
//  - A reclaimed bucket's new generation is journaled before the bucket is
//    reused (BucketAllocator's gen persister), so a replayed pointer into a
//    reused bucket is stale.
//  - Checkpoint(): nodes, then the bucket table as the first record of a new
//    journal in the other half of the journal area, then the superblock
//    naming root and table (flush, FUA, flush). Until that superblock write
//    the old half is untouched, so a crash at any point recovers one or the
//    other.
//
// Threads: any method from any thread, except CommitAsync (a serving
// reactor). The set runs the journal thread (JournalLoop) and housekeeping
// (GC, priority decay, the index nodes serving reactors left dirty over
// budget); the allocator runs its refill thread.
// Lock order, outermost first: gc_mu_; ckpt_mu_; the index's commit mutex;
// backing_mu_ (a checkpoint's backing flushes, which may journal a record);
// the index's shard mutexes (undirty_mu_ is taken under a shard, from the
// dirty accounting, and nothing under it); the node store's slot map and
// the allocator's lock (a node allocation under a shard); dev_mu_; gen_mu_;
// then the Journal's lock, jmu_ and sb_mu_ (each taken under gen_mu_ when a
// checkpoint switches journals or a gens append finds the journal full).
// hk_mu_ is a leaf: housekeeping's wait, and RunMayWait and the index's
// wake_writer (under a shard lock) queueing work for it.
// The commit slot (ExcludeSoftCommits, taken first by Commit, the journal
// thread and WriteCheckpoint) is no lock but waits for a reactor's soft
// record to land, whose completion takes the Journal's lock, the index's
// commit mutex and (if the write failed) its shard mutexes, then jmu_: so
// it is never waited for with any of those held, nor on a serving reactor.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "backend/block_device.h"
#include "btree/extent_index.h"
#include "btree/node_store.h"
#include "cache/bucket_allocator.h"
#include "cache/bucket_node_store.h"
#include "cache/congestion.h"
#include "cache/service_time.h"
#include "cache/knobs.h"
#include "cache/superblock.h"
#include "util/status.h"
#include "util/thread_annotations.h"

namespace ubcache {

class BackingDurability;

class CacheSet {
 public:
  struct Options {
    uint64_t bucket_size = 512 << 10;
    // Bytes at the start of the cache device never used for data
    // (superblock, journal); rounded up to whole buckets.
    uint64_t reserved_bytes = 1 << 20;
    uint64_t btree_cache_size = 64 << 20;
  };

  static Result<std::unique_ptr<CacheSet>> Create(BlockDevice* cache_dev, Options o);
  // `sb` was just read from cache_dev; its geometry overrides o's. Errors:
  // I/O errors writing the superblock; a damaged warm state is not an error
  // (it is logged, and the start is cold).
  static Result<std::unique_ptr<CacheSet>> Open(BlockDevice* cache_dev, const CacheSuperblock& sb,
                                                Options o);
  // Destroying a set without Shutdown() is a crash: the next Open is cold.
  ~CacheSet();
  // Clean shutdown, once no request is in flight: stop housekeeping,
  // checkpoint the index (root into the superblock), write the bucket
  // table, then the superblock with `clean` set. For a Create()d set it
  // only stops housekeeping.
  Status Shutdown() EXCLUDES(gen_mu_, ckpt_mu_);

  bool persistent() const { return persistent_; }
  bool warm() const { return warm_; }
  // The device number (the index's `dev`) of a backing device. A backing
  // device with a uuid that was attached to this set before (its superblock
  // carries this set's uuid) gets its number from the last clean shutdown,
  // so its cached extents are found again; any other (unformatted, newly
  // attached, or attached elsewhere since) gets a number never used before,
  // so no extent left from earlier can be taken for its data.
  uint32_t DeviceNumber(const Uuid& backing_uuid, bool was_attached);
  // Drops every extent of device `dev` in [0, size), dirty ones included
  // (their dirty bytes with them), a bounded step at a time so no index
  // shard is held for long; Commit() makes it durable.
  Status DropDevice(uint32_t dev, uint64_t size);

  // Rule 9 (cache/backing_durability.h): each cached device's view of its
  // backing device's volatile cache, which a checkpoint flushes before its
  // superblock write when a provisional clean copy is not yet covered, and
  // which moving GC asks whether a clean copy it moves is durable.
  void RegisterBacking(uint32_t dev, BackingDurability* b) EXCLUDES(backing_mu_);
  void UnregisterBacking(uint32_t dev, BackingDurability* b) EXCLUDES(backing_mu_);
  // Synchronous I/O on `dev` from any thread that is not a reactor (the
  // node store's I/O thread runs it). Persistent sets only.
  Status SyncIoOn(BlockDevice* dev, const IoRequest& req);

  // Fences (doc/format.md §2): backing devices that lost their ownership
  // while this set served them (rbd: another client broke the image's lock).
  // Their cached data may be older than the new owner's, so the next start
  // neither serves nor writes it back until an operator decides (serve
  // --after-fence). RecordFence is durable on return (a superblock write;
  // not on a serving reactor); a no-op for a Create()d set or a backing
  // device without a uuid, whose data no later start can find.
  Status RecordFence(const Uuid& backing) EXCLUDES(sb_mu_);
  Status ClearFence(const Uuid& backing) EXCLUDES(sb_mu_);
  // When the fence was recorded (unix seconds), if there is one.
  std::optional<uint64_t> FencedSince(const Uuid& backing) EXCLUDES(sb_mu_);
  // The set uuid (zero for a Create()d set).
  const Uuid& set_uuid() const { return set_uuid_; }

  // Makes every index change made before the call durable (group commit on
  // the journal thread); `done` runs on the calling reactor. At once for a
  // Create()d set, which has nothing durable.
  //
  // With `soft`, only written (ExtentIndex::Commit's soft entry): done runs
  // once the changes would survive a crash of this process, and they are
  // durable within journal_delay_ms (or at the next hard commit). For a
  // writeback write's dirty insert, made checked, so that a power cut that
  // kept the entry and lost the data is seen at replay.
  void CommitAsync(IoDone done, bool soft = false) EXCLUDES(jmu_);
  // The same, synchronously (any thread that is not a serving reactor).
  Status Commit();
  // Where commits ran: soft commits a reactor led and wrote on its own ring
  // (the writeback ack), batches it gave back to the journal thread (the
  // journal busy, or its write failed), and synchronous cache-device I/O
  // through the node store's I/O thread (hard commits, checkpoints, gens).
  struct CommitStats {
    uint64_t reactor_commits = 0, handed_back = 0, io_thread_calls = 0;
  };
  CommitStats commit_stats() const;
  // Writes a checkpoint (see above); serve calls it once the backing devices
  // have their device numbers, so a crash finds them again.
  Status Checkpoint() EXCLUDES(gen_mu_, ckpt_mu_);
  // A cache-device I/O error (counted, logged). Past io_error_limit the
  // cache is failed: from then on every cached device serves its backing
  // device alone, except that its dirty ranges answer EIO (their only copy
  // is on the failing device); see CachedDevice.
  void CountIoError(const Status& st);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  uint64_t io_errors() const { return io_errors_.load(std::memory_order_relaxed); }
  // bcache's in_use: percent of the cache's buckets that cannot be reclaimed
  // (dirty data or metadata) — what cutoff_writeback compares against.
  unsigned in_use_percent() const;

  struct StartupStats {
    uint64_t bytes_read = 0;  // superblock excluded
    uint64_t node_reads = 0;
    uint64_t table_bytes = 0;
    uint64_t micros = 0;
  };
  const StartupStats& startup() const { return startup_; }

  BlockDevice* cache_dev() const { return cache_dev_; }
  BucketAllocator& buckets() { return *buckets_; }
  ExtentIndex& index() { return *index_; }
  Congestion& congestion() { return congestion_; }
  // What the cache device's reads and writes take (the auto policies).
  ServiceTime& cache_time() { return cache_time_; }
  CacheKnobs& knobs() { return knobs_; }
  const Options& options() const { return o_; }

  // Garbage collection, as bcache's btree GC does for its buckets: counts
  // every bucket's live bytes (reclaim then takes empty buckets first) and
  // drops every extent whose bucket generation has moved on (a stale
  // pointer is already a miss; dropping it lets the generation run ahead
  // again without wrapping onto it). Runs from housekeeping when a bucket's
  // generation lead passes half of kMaxGenLead; foreground requests never
  // wait on it — it holds one index shard at a time for one batch of
  // extents, and the allocator's lock for one chunk of buckets at a time.
  // Returns the number of stale extents dropped.
  // With `force_moving` (ctl trigger-gc, tests) moving GC runs whatever the
  // free space.
  Result<uint64_t> RunGc(bool force_moving = false) EXCLUDES(gc_mu_);
  uint64_t gc_runs() const { return gc_runs_.load(std::memory_order_relaxed); }
  uint64_t moving_gc_bytes() const { return moving_gc_bytes_.load(std::memory_order_relaxed); }
  // Runs fn soon on housekeeping, a thread that may wait: for the rare index
  // change a serving reactor cannot make without I/O (index_call.h). Any
  // thread; fn runs even when housekeeping is stopping.
  void RunMayWait(Callback<void()> fn) EXCLUDES(hk_mu_);

 private:
  CacheSet(BlockDevice* cache_dev, Options o) : cache_dev_(cache_dev), o_(o) {}
  static Result<std::unique_ptr<BucketAllocator>> MakeAllocator(BlockDevice* dev, const Options& o);
  Status Recover();
  Status StartCold();
  // Allocator, node store and journal (at `journal_half`), with the gen
  // persister and dirty accounting wired.
  Status MakeStore(unsigned journal_half);
  ExtentIndex::Options IndexOptions();
  Status PersistGens(const std::vector<std::pair<uint32_t, uint8_t>>& gens) EXCLUDES(gen_mu_);
  // Takes ckpt_mu_ (one checkpoint at a time) and writes the checkpoint.
  Status WriteCheckpoint(bool clean) EXCLUDES(gen_mu_, ckpt_mu_);
  // Rule 9, a checkpoint's step before its superblock write.
  Status FlushBackingsForCheckpoint() EXCLUDES(backing_mu_);
  // Whether a clean copy of `dev`'s data may be journaled as durable now.
  bool CleanCopyDurable(uint32_t dev) EXCLUDES(backing_mu_);
  // RunGc's second half (see there); `live` is updated for the moved buckets.
  Status MovingGc(std::vector<uint32_t>& live, bool force) REQUIRES(gc_mu_);
  static constexpr uint64_t kMovingGcFreeDivisor = 4;  // runs while free < 1/4 of the buckets
  static constexpr size_t kMovingGcBuckets = 64;       // buckets emptied per GC
  static constexpr uint64_t kMovingGcEverySeconds = 10;  // housekeeping runs it this often when short
  // The journal thread and its waiters (CommitAsync).
  struct CommitWaiter {
    IoDone done;
    Reactor* reactor;
    bool soft;
  };
  void JournalLoop() EXCLUDES(jmu_);
  // The commit slot (doc/design.md "the writeback ack"): either one soft
  // commit led by a reactor is in flight (soft_inflight_), or any number of
  // excluders — the journal thread, Commit(), a checkpoint — hold it, never
  // both. A reactor leads only while nobody excludes and no hard waiter is
  // queued; an excluder waits for the one in flight.
  void LeadSoftCommit() EXCLUDES(jmu_);
  // The led commit's record is written (or failed): answer `batch`, then
  // lead the next batch if there is one, or wake the journal thread.
  void EndSoftCommit(std::vector<CommitWaiter> batch, ExtentIndex::SoftCommit* c, Status st)
      EXCLUDES(jmu_);
  // Gives a batch back to the journal thread (a reactor could not lead it).
  void HandBack(std::vector<CommitWaiter> batch) EXCLUDES(jmu_);
  // Whether a reactor may lead a soft commit now (the slot aside).
  bool MayLeadLocked() const REQUIRES(jmu_);
  void ExcludeSoftCommits() EXCLUDES(jmu_);
  void AllowSoftCommits() EXCLUDES(jmu_);
  class SoftCommitsExcluded {
   public:
    explicit SoftCommitsExcluded(CacheSet* s) : s_(s) { s_->ExcludeSoftCommits(); }
    ~SoftCommitsExcluded() { s_->AllowSoftCommits(); }
    SoftCommitsExcluded(const SoftCommitsExcluded&) = delete;
    SoftCommitsExcluded& operator=(const SoftCommitsExcluded&) = delete;

   private:
    CacheSet* s_;
  };
  // Runs a commit or checkpoint; on success releases the dirty-byte
  // decrements recorded before it (see IndexOptions' on_dirty).
  Status Durably(const std::function<Status()>& commit);
  std::vector<std::pair<uint32_t, int64_t>> TakeUndirty() EXCLUDES(undirty_mu_);
  void ReleaseUndirty(const std::vector<std::pair<uint32_t, int64_t>>& taken);
  void StopJournal() EXCLUDES(jmu_);
  // Writes sb_ (seq bumped) with `root` (nullptr: keep), clean or not, and
  // the bucket table pointer: flush, write, flush.
  Status WriteSuperblock(const IndexRoot* root, bool clean, uint64_t table_off, uint64_t table_len)
      EXCLUDES(sb_mu_);
  // Writes sb_ with seq bumped and `change` applied (flush, write, flush).
  Status ChangeSuperblock(const std::function<void(CacheSuperblock&)>& change) EXCLUDES(sb_mu_);
  void StartThreads();  // the allocator's refill thread and housekeeping
  void StopHousekeeping() EXCLUDES(hk_mu_);
  void Housekeeping() EXCLUDES(hk_mu_);
  // Once a second: GC when due, priority decay every 30th.
  void HousekeepingTick(uint64_t tick);

  BlockDevice* cache_dev_;
  Options o_;
  std::unique_ptr<BucketAllocator> buckets_;
  std::unique_ptr<NodeStore> store_;
  std::unique_ptr<ExtentIndex> index_;
  BucketNodeStore* disk_store_ = nullptr;  // store_, when persistent
  bool persistent_ = false;
  bool warm_ = false;
  Uuid set_uuid_{};
  uint64_t set_id_ = 0;
  StartupStats startup_;
  Mutex sb_mu_;
  CacheSuperblock sb_ GUARDED_BY(sb_mu_);
  Mutex dev_mu_;
  std::vector<std::pair<Uuid, uint32_t>> devices_ GUARDED_BY(dev_mu_);
  uint32_t next_dev_ GUARDED_BY(dev_mu_) = 0;
  Congestion congestion_;
  ServiceTime cache_time_;
  CacheKnobs knobs_;
  // Journal halves: [jstart_, jstart_ + jhalf_) and the next jhalf_ bytes.
  uint64_t jstart_ = 0, jhalf_ = 0;
  unsigned active_half_ = 0;
  // Held from exporting the bucket table to switching the journal, and by
  // every gens append: no generation goes to a journal the table missed.
  Mutex gen_mu_;
  Mutex ckpt_mu_;  // one checkpoint at a time
  // The journal thread and its waiters (CommitAsync): see CommitWaiter.
  Mutex jmu_;
  CondVar jcv_;
  std::vector<CommitWaiter> waiters_ GUARDED_BY(jmu_);
  size_t hard_waiting_ GUARDED_BY(jmu_) = 0;  // of waiters_, not soft
  bool soft_inflight_ GUARDED_BY(jmu_) = false;  // a reactor leads a soft commit
  unsigned excluded_ GUARDED_BY(jmu_) = 0;       // ExcludeSoftCommits holders
  bool checkpoint_wanted_ GUARDED_BY(jmu_) = false;  // a led commit found the journal half full
  bool jstop_ GUARDED_BY(jmu_) = false;
  std::atomic<uint64_t> reactor_commits_{0}, handed_back_{0};
  std::thread journal_thread_;
  Mutex undirty_mu_;  // leaf lock: taken under index shard locks
  std::vector<std::pair<uint32_t, int64_t>> undirty_ GUARDED_BY(undirty_mu_);
  std::atomic<uint64_t> io_errors_{0};
  std::atomic<uint64_t> moving_gc_bytes_{0};
  std::atomic<bool> failed_{false};
  // Taken under the index's commit mutex (a checkpoint's persist step),
  // and with nothing else held; only the index's shard mutexes under it.
  Mutex backing_mu_;
  std::vector<std::pair<uint32_t, BackingDurability*>> backings_ GUARDED_BY(backing_mu_);
  Mutex gc_mu_;  // one GC at a time
  std::atomic<uint64_t> gc_runs_{0};
  Mutex hk_mu_;
  CondVar hk_cv_;
  bool hk_stop_ GUARDED_BY(hk_mu_) = false;
  bool hk_write_nodes_ GUARDED_BY(hk_mu_) = false;  // ExtentIndex::Options::wake_writer
  std::vector<Callback<void()>> hk_jobs_ GUARDED_BY(hk_mu_);  // RunMayWait
  std::thread hk_;
};

}  // namespace ubcache
