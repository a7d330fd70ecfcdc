// SPDX-License-Identifier: Apache-2.0
// ExtentIndex: the cache's map from ranges of backing devices to where their
// data lives on the cache device — a sharded B+tree of extents with a
// journal, whose nodes live in a NodeStore and are cached in bounded memory.
//
// Shape. The key space is cut into stripes of `stripe_bytes` (1 MiB) of
// backing offset; each stripe of each device hashes to one of `shards`
// independent trees (ExtentTree), each with its own mutex, node cache slice
// and pending journal ops. Extents are split at stripe boundaries, so every
// stored extent lies within one stripe and one shard. An operation locks the
// shards its range touches, in index order (no deadlock); a request of at
// most one stripe takes one or two shard locks, and nothing on the hot path
// takes a lock across the whole index.
//
// Threads. Every public method may be called from any thread, concurrently.
// Lookup/Insert/Invalidate/InsertIfUnchanged lock their shards; Commit and
// Checkpoint hold the commit mutex and visit shards one at a time (each shard
// lock is held only to swap its pending ops out, or, in Checkpoint, to write
// that shard's dirty nodes). stats() takes no lock.
// Lock order: commit_mu_, then shard mutexes in ascending index; under a
// shard mutex the NodeStore (node reads, eviction writes, allocations) and
// Options::on_dirty run, so they may take their own locks but must never
// call back into the index.
//
// Durability. Every mutation is applied in memory and appended to its shard's
// pending journal ops (unless Options::journaled is false); Commit() writes all pending ops as one checksummed,
// sequence-numbered journal entry. Checkpoint() writes every dirty node
// (copy-on-write, see extent_tree.h) and yields an IndexRoot for the cache
// superblock. After a crash, Open(last durable root) reads the roots and
// replays the journal entries after the root's journal_seq: the result is
// exactly the state as of the last Commit (or Checkpoint). Replay stops at
// the first torn or corrupt entry, which is the crash tail.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "btree/extent.h"
#include "btree/extent_tree.h"
#include "btree/journal_format.h"
#include "btree/node_store.h"
#include "util/status.h"
#include "util/thread_annotations.h"

namespace ubcache {

// What the cache superblock stores to find the index again. Encoded with
// Encode() (explicit little-endian, checksummed; grammar in doc/format.md).
struct IndexRoot {
  uint32_t node_size = 0;
  uint64_t stripe_bytes = 0;
  uint64_t journal_seq = 0;  // last journal entry the checkpoint contains
  uint64_t generation = 0;   // checkpoints taken so far
  std::vector<ShardRoot> shards;

  static size_t EncodedSize(size_t nshards) { return 48 + 32 * nshards; }
  std::vector<uint8_t> Encode() const;
  // Errors: Corruption("index root: <check>") — short, bad magic, bad
  // version, bad shard count, bad csum, bad geometry, bad level.
  static Result<IndexRoot> Decode(const uint8_t* data, size_t len);
};

class ExtentIndex {
 public:
  struct Options {
    uint64_t cache_bytes = 64 << 20;  // btree_cache_size: decoded nodes in memory
    unsigned shards = 16;             // Create only; Open takes the root's
    uint64_t stripe_bytes = 1 << 20;  // Create only; a power of two, 4 KiB .. 1 GiB
    // Stamped into every node and journal entry and checked on read: derive
    // it from the cache set uuid, so leftovers of an earlier format of the
    // same device are never taken for live metadata.
    uint64_t set_id = 0;
    // Dirty accounting. Every dirty extent's bytes are counted per stripe of
    // its backing device (what writeback scans) and per `bucket_bytes` of
    // the cache device (a bucket holding dirty data is never reclaimed);
    // on_dirty(bucket, delta) is told each change of a bucket's count, under
    // the shard's lock (so it must not call back into the index).
    uint64_t bucket_bytes = 0;  // 0: no per-bucket accounting
    std::function<void(uint64_t bucket, int64_t delta)> on_dirty;
    // Open: whether the cache device holds, at piece.cache_offset, the
    // piece.len bytes whose XXH3-64 is `hash` — asked of each checked insert
    // in an unconfirmed journal entry (see Commit). Unset: every check holds.
    std::function<bool(const Extent& piece, uint64_t hash)> check_data;
    // Open: told each insert the journal replay applied, so the cache can
    // mark the bucket it points into as recently filled.
    std::function<void(const Extent& e)> on_replayed_insert;
    // Whether mutations are recorded for Commit. false: for an index no one
    // reopens (an unformatted cache's, in memory for one run) — nothing is
    // kept per mutation (no pending ops, no data hashes), so its memory is
    // the tree's alone; Commit then writes nothing, and Open would replay
    // no entry of this index's.
    bool journaled = true;
  };
  // What a checkpoint hands to persist besides the root: node addresses the
  // new root no longer reaches (freed once it is durable), and the dirty
  // accounting as of each shard's snapshot, encoded, for Open.
  struct CheckpointState {
    std::vector<uint64_t> superseded;
    std::vector<uint8_t> dirty;
  };
  using PersistStateFn = std::function<Status(const IndexRoot&, const CheckpointState&)>;
  // Called by Checkpoint with the new root once every node is written, before
  // the journal is trimmed and superseded nodes are freed: it must make the
  // root durable (the cache superblock write, FUA).
  using PersistRootFn = std::function<Status(const IndexRoot&)>;

  static Result<std::unique_ptr<ExtentIndex>> Create(NodeStore* store, Options options);
  // `dirty`: the CheckpointState::dirty saved with `root` (null: none dirty).
  static Result<std::unique_ptr<ExtentIndex>> Open(NodeStore* store, const IndexRoot& root,
                                                   Options options,
                                                   const std::vector<uint8_t>* dirty = nullptr);
  // Writes nothing: destroying an index without Checkpoint is a crash.
  ~ExtentIndex();

  // All extents of dev overlapping [start, start+len), clipped to that range,
  // in order of start. A clipped extent's cache_offset is advanced to match.
  Status Lookup(uint32_t dev, uint64_t start, uint64_t len, std::vector<Extent>* out);
  // Inserts e, trimming or splitting whatever it overlaps. With `data` (e.len
  // bytes, what e's cache location holds), the insert is journaled checked:
  // each piece carries the hash of its data, so it may be committed soft.
  Status Insert(const Extent& e, const uint8_t* data = nullptr);
  // Removes [start, start+len) of dev, splitting extents at the edges.
  // *removed_dirty (if given) = the dirty bytes it removed.
  Status Invalidate(uint32_t dev, uint64_t start, uint64_t len, uint64_t* removed_dirty = nullptr);
  // Writeback: `e` (a dirty piece as Lookup returned it) has been written to
  // the backing device and flushed there. Marks clean exactly the parts of
  // the range that still map to e's data (same cache location and gen,
  // still dirty); a part rewritten or removed meanwhile is left alone, so
  // writeback never marks clean data it did not write. *cleaned = bytes.
  Status MarkClean(const Extent& e, uint64_t* cleaned);
  // A write's first step: removes the clean extents of the range (so
  // nothing stale is read while the write is in flight, and racing fills
  // are refused) but keeps dirty ones — they are the only copy until the
  // write's own insert replaces them in one step. *has_dirty: any kept.
  // *removed_clean (if given): bytes of clean extents removed — a caller
  // that then writes the backing device must commit first when it is not
  // zero (CachedDevice::AfterCleanDropped).
  Status InvalidateClean(uint32_t dev, uint64_t start, uint64_t len, bool* has_dirty,
                         uint64_t* removed_clean = nullptr);
  // Moving GC: the data of `e` was copied to new_offset (a bucket of gen
  // new_gen); points the parts still mapping to e's data there, dirty or
  // not as they were. *moved = bytes.
  // With `data` (e.len bytes, the copy), the moves are journaled checked.
  Status MoveIfSame(const Extent& e, uint64_t new_offset, uint8_t new_gen, uint64_t* moved,
                    const uint8_t* data = nullptr);
  // GC: removes exactly the parts of e's range that still map to e's data
  // (a stale pointer), never an extent inserted there since.
  Status RemoveIfSame(const Extent& e);
  // Dirty bytes of dev (O(shards), shard locks).
  uint64_t DirtyBytes(uint32_t dev);
  // Up to `max` stripe numbers (offset / stripe_bytes) of dev at or after
  // `from_stripe` that hold dirty data, ascending.
  std::vector<uint64_t> DirtyStripes(uint32_t dev, uint64_t from_stripe, size_t max);

  // Read-miss protocol: since = Sequence(range) BEFORE reading the backing
  // device; then InsertIfUnchanged(e, since) inserts only if no Insert or
  // Invalidate touched the range after Sequence() returned (else *inserted
  // = false: a cache_miss_collision). Fills themselves change no content and
  // do not count as changes. Change tracking is per 64 KiB chunk,
  // hashed into a fixed table, so unrelated writes can cause a false
  // collision (the data is then just not cached), never a missed one.
  uint64_t Sequence(uint32_t dev, uint64_t start, uint64_t len);
  Status InsertIfUnchanged(const Extent& e, uint64_t since, bool* inserted);

  // Makes every Insert/Invalidate that returned before this call durable:
  // one journal append for all of them (concurrent callers batch).
  //
  // With `soft`, the append is NodeStore::AppendJournalSoft: the ops survive
  // a crash of the process at once, and a power cut only from the next hard
  // Commit (which syncs the store even with no ops of its own). An entry a
  // power cut may have kept without the data it points at is unconfirmed;
  // Open replays it only if every checked insert's data hash holds, and
  // replays its unchecked clean inserts as invalidations (the backing device
  // holds that data). An unconfirmed entry with an unchecked dirty insert
  // ends replay. So ops that point at newly written cache data may be
  // committed soft only if they were inserted with their data (checked), or
  // are clean — which is every op this index makes.
  Status Commit(bool soft = false);
  // Writes dirty nodes and returns the root to store in the superblock.
  // With `persist`, it is called with the root before the journal is trimmed,
  // and superseded nodes are freed only after it succeeds: crash-safe at
  // every point. Without it, the journal is trimmed before returning and the
  // caller stores the root; a crash in that window loses the commits since
  // the previous checkpoint, so the cache layer passes `persist`. (Superseded
  // nodes are then freed one checkpoint later, so the previous root stays
  // readable until the caller has stored this one.)
  Result<IndexRoot> Checkpoint(const PersistRootFn& persist = nullptr);
  Result<IndexRoot> Checkpoint(const PersistStateFn& persist);

  // Calls fn for every extent, a batch at a time (bounded memory, no lock
  // held while fn runs, so fn may call back into the index). Order: shard by
  // shard, by key within a shard. Concurrent changes may or may not be seen.
  Status ForEach(const std::function<void(const Extent&)>& fn);

  struct Stats {
    uint64_t extents, nodes, cached_nodes, cached_bytes, node_reads, node_writes, journal_bytes;
  };
  Stats stats() const;  // lock-free, O(shards)
  void SetCacheBytes(uint64_t bytes);
  unsigned shard_count() const { return static_cast<unsigned>(shards_.size()); }
  uint64_t stripe_bytes() const { return stripe_; }

 private:
  struct Shard {
    Mutex mu;
    TreeCounters counters;
    std::unique_ptr<ExtentTree> tree GUARDED_BY(mu);
    std::vector<uint8_t> journal GUARDED_BY(mu);  // encoded ops since the last Commit
    uint32_t journal_ops GUARDED_BY(mu) = 0;
    Status error GUARDED_BY(mu);  // a failed eviction write, reported by Commit
    // Dirty bytes of this shard's extents: by (dev, stripe), by dev, by bucket.
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> dirty_stripes GUARDED_BY(mu);
    std::map<uint32_t, uint64_t> dirty_devs GUARDED_BY(mu);
    std::map<uint64_t, uint64_t> dirty_buckets GUARDED_BY(mu);
  };
  class ShardLocks;

  ExtentIndex(NodeStore* store, uint32_t nshards, uint64_t stripe, const Options& o);
  uint32_t ShardOf(uint32_t dev, uint64_t offset) const;
  std::vector<uint32_t> ShardsFor(uint32_t dev, uint64_t start, uint64_t end) const;
  Status Mutate(uint32_t dev, uint64_t start, uint64_t end, const Extent* insert, const uint8_t* data,
                const uint64_t* since, bool* inserted, uint64_t* removed_dirty);
  bool ChangedSince(uint32_t dev, uint64_t start, uint64_t end, uint64_t since) const;
  void MarkChanged(uint32_t dev, uint64_t start, uint64_t end, uint64_t seq);
  Status ApplyJournalOp(const JournalOp& op);
  // Counts `removed` dirty pieces out and `added` (if dirty) in.
  void AccountLocked(Shard* sh, const std::vector<Extent>& removed, const Extent* added)
      REQUIRES(sh->mu);
  void EncodeDirtyLocked(Shard* sh, std::vector<uint8_t>* out) REQUIRES(sh->mu);
  Status DecodeDirty(const std::vector<uint8_t>& blob);
  enum class Change { kClean, kRemove, kMove };
  // An unconfirmed entry's ops as replay may apply them: false when they
  // cannot be (a data check fails), see Commit.
  bool ConfirmOps(std::vector<JournalOp>* ops) const;
  // The parts of e's range that still map to e's data: marked clean,
  // removed, or moved to *to's location (dirty flag kept).
  Status ChangeIfSame(const Extent& e, Change how, const Extent* to, uint64_t* changed,
                      const uint8_t* data = nullptr);
  void EvictLocked(Shard* sh) REQUIRES(sh->mu);
  // Record one op in the shard's pending journal (nothing when unjournaled).
  void JournalInsertLocked(Shard* sh, const Extent& piece, const uint64_t* hash) REQUIRES(sh->mu);
  void JournalInvalidateLocked(Shard* sh, uint32_t id, uint32_t dev, uint64_t start, uint64_t end)
      REQUIRES(sh->mu);
  uint64_t ShardBudget() const;
  void ReturnPendingOps(std::vector<std::vector<uint8_t>>* taken, std::vector<uint32_t>* ops);

  NodeStore* const store_;
  const uint64_t stripe_;
  const uint64_t set_id_;
  const uint64_t bucket_bytes_;
  const bool journaled_;
  const std::function<void(uint64_t, int64_t)> on_dirty_;
  const std::function<bool(const Extent&, uint64_t)> check_data_;
  const std::function<void(const Extent&)> on_replayed_insert_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> cache_bytes_;
  std::atomic<uint64_t> seq_{0};  // mutation sequence for InsertIfUnchanged
  std::unique_ptr<std::atomic<uint64_t>[]> chunk_seq_;  // last mutation per chunk slot
  std::atomic<uint64_t> journal_bytes_{0};

  Mutex commit_mu_;  // taken before any shard mutex
  uint64_t journal_seq_ GUARDED_BY(commit_mu_) = 0;
  uint64_t generation_ GUARDED_BY(commit_mu_) = 0;
  // Superseded node addresses a stored root may still reach: freed after the
  // next checkpoint.
  std::vector<uint64_t> release_ GUARDED_BY(commit_mu_);
};

}  // namespace ubcache
