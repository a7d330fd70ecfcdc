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
// shard mutex the NodeStore (node reads and eviction writes off serving
// reactors, allocations) and Options::on_dirty and wake_writer run, so they
// may take their own locks but must never call back into the index. A node
// read without I/O (LoadMissing) runs under no lock.
//
// Without I/O. On a serving reactor (util/thread.h: IsServingThread) no call
// reads or writes a node, and no shard lock is held across I/O: a call that
// needs a node not in memory changes nothing and returns WouldBlock (as
// bcache's cache_lookup returns -EAGAIN, to be run again). The caller then
// calls LoadMissing(done) on the same thread: it reads that node on the
// thread's reactor, puts it in place when the read completes, and calls
// done there; the caller runs its call again (each pass may find the next
// level missing). A change first probes every node it will touch (shards,
// pieces), so it fails before anything changed or not at all; a change of
// more than 1024 extents in one shard cannot be made that way (the nodes
// it needs may not fit the budget): WouldBlock with no node to read
// (HasMissingNode() false), and the caller makes it on a thread that may
// wait. Eviction on a serving reactor drops clean nodes only; a dirty node
// over budget waits for WriteOverBudget, which Options::wake_writer asks a
// thread that may wait to call. Any other thread reads and writes nodes
// synchronously, as before.
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
#include <set>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "btree/extent.h"
#include "btree/extent_tree.h"
#include "btree/journal_format.h"
#include "btree/node_store.h"
#include "btree/write_epoch.h"
#include "util/callback.h"
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
    // Called (under a shard lock, at most once until WriteOverBudget runs)
    // when an eviction on a serving reactor left dirty nodes over budget:
    // it should make a thread that may wait call WriteOverBudget().
    std::function<void()> wake_writer;
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
  // With `provisional` (a clean e only; ordering rule 9, doc/design.md): e
  // copies backing data that may not be durable on the backing device yet.
  // It is journaled provisional: replay applies it only if a backing-flushed
  // op of e.dev covers its entry (JournalBackingFlushed), else it replays as
  // an invalidation of its range. A checkpoint that contains it must not
  // become durable before a backing flush covers it (the persist hook's job).
  // With `rule` (a dirty insert of the foreground), each piece takes the
  // device's current epoch, read under the shard lock, and, with
  // rule->keep_older, a dirty piece of an older epoch it replaces becomes a
  // kept version (below) instead of being dropped.
  Status Insert(const Extent& e, const uint8_t* data = nullptr, bool provisional = false,
                const EpochRule* rule = nullptr);
  // Removes [start, start+len) of dev, splitting extents at the edges.
  // *removed_dirty (if given) = the dirty bytes it removed.
  Status Invalidate(uint32_t dev, uint64_t start, uint64_t len, uint64_t* removed_dirty = nullptr);
  // Writeback: `e` (a dirty piece as Lookup returned it) has been written to
  // the backing device and flushed there. Marks clean exactly the parts of
  // the range that still map to e's data (same cache location and gen,
  // still dirty); a part rewritten or removed meanwhile is left alone, so
  // writeback never marks clean data it did not write. *cleaned = bytes.
  Status MarkClean(const Extent& e, uint64_t* cleaned);
  // Before a write or discard reaches the backing device (rule 5): removes
  // the clean extents of the range (racing fills are refused) but keeps
  // dirty ones — they are the only copy until the request's own insert or
  // invalidation replaces them in one step. *has_dirty: any kept.
  // *removed_clean (if given): bytes of clean extents removed — a caller
  // that then writes the backing device must commit first when it is not
  // zero (CachedDevice::AfterCleanDropped).
  Status InvalidateClean(uint32_t dev, uint64_t start, uint64_t len, bool* has_dirty,
                         uint64_t* removed_clean = nullptr);
  // A client write's first step (CachedDevice::DoWrite): marks the range
  // changed, so fills that read the backing device before this write are
  // refused, and says whether dirty data (extents or kept versions) overlaps
  // it. Removes nothing: a write the cache takes replaces the range's clean
  // copies with its insert, in place when it covers them exactly, and every
  // write that goes to the backing device removes them first (rule 5,
  // RangeGuard::AfterCleanCopiesGone). Until then a read of the range may
  // still get the clean copy — it is the data as it was before this write,
  // which a read that overlaps a write in flight may return. With
  // `has_dirty` null it only marks the range: no node is searched or read
  // (never WouldBlock), for a write whose road does not depend on it.
  Status MarkWrite(uint32_t dev, uint64_t start, uint64_t len, bool* has_dirty);
  // Moving GC: the data of `e` was copied to new_offset (a bucket of gen
  // new_gen); points the parts still mapping to e's data there, dirty or
  // not as they were. *moved = bytes.
  // With `data` (e.len bytes, the copy), the moves are journaled checked.
  // With `provisional`, clean parts are journaled provisional (see Insert).
  Status MoveIfSame(const Extent& e, uint64_t new_offset, uint8_t new_gen, uint64_t* moved,
                    const uint8_t* data = nullptr, bool provisional = false);
  // GC: removes exactly the parts of e's range that still map to e's data
  // (a stale pointer), never an extent inserted there since.
  Status RemoveIfSame(const Extent& e);
  // Dirty bytes of dev (O(shards), shard locks), kept versions included.
  uint64_t DirtyBytes(uint32_t dev);

  // Write epochs (btree/write_epoch.h; extent_index_epochs.cpp). A kept
  // version is a dirty piece that a dirty insert of a later epoch replaced
  // while writeback was in `flush` order: the backing device must get it,
  // in its epoch, before anything of a later one. It is not in the tree
  // (reads never see it) but counts as dirty (DirtyBytes, the bucket's
  // dirty bytes: its bucket is never reclaimed) until Unkeep; journaled
  // (keep/unkeep ops) and saved with the checkpoint's dirty state. Any
  // change that puts other data in its range on the backing device first —
  // Invalidate, a clean insert — drops the kept versions there (their data
  // is older than what the backing device is getting).
  //
  // The newest epoch dev's dirty data or kept versions hold (0: none).
  uint64_t NewestEpoch(uint32_t dev);
  // The oldest epoch dev's dirty data or kept versions hold.
  std::optional<uint64_t> OldestEpoch(uint32_t dev);
  // How many epochs dev's dirty data or kept versions hold (O(epochs x
  // shards), shard locks: for ctl and metrics, not the data path).
  uint64_t DirtyEpochs(uint32_t dev);
  // Up to `max` stripes of dev, ascending, holding dirty data or kept
  // versions of `epoch`.
  std::vector<uint64_t> EpochStripes(uint32_t dev, uint64_t epoch, size_t max);
  // The kept versions of (dev, epoch) starting in [start, end), by start.
  std::vector<Extent> KeptVersions(uint32_t dev, uint64_t epoch, uint64_t start, uint64_t end);
  // Writeback wrote `kept` (as KeptVersions returned it) and flushed the
  // backing device: forgets it if it is still kept. *dropped = its bytes or 0.
  Status Unkeep(const Extent& kept, uint64_t* dropped);
  // Forgets every kept version of dev (writeback_order lba: newer dirty data
  // of the same ranges goes back in address order anyway); returns bytes.
  uint64_t DropKeptVersions(uint32_t dev);
  // Calls fn for every kept version (GC counts them live), under no lock.
  void ForEachKept(const std::function<void(const Extent&)>& fn);
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
  // A fill is refused too while a client write to the backing device over
  // the range is in flight, from before it is issued (Begins) until after
  // its completion changed the index (Ends): the fill may have read its
  // data, which the backing device may lose (rule 9; and the copy would
  // outlive a cut that kept the fill's entry and lost the write's). Same
  // chunks, same false positives.
  void BackingWriteBegins(uint32_t dev, uint64_t start, uint64_t len);
  void BackingWriteEnds(uint32_t dev, uint64_t start, uint64_t len);
  Status InsertIfUnchanged(const Extent& e, uint64_t since, bool* inserted,
                           bool provisional = false);

  // Rule 9's journal side (see Insert). Lock-free reads: the last entry
  // Commit wrote — a backing flush issued after reading it covers every
  // provisional insert in the entries up to it, whose ops were all made
  // before it was written, so after their backing I/O completed; the first
  // entry of this run (a flush now says nothing of what an earlier run left
  // unflushed: a power cut in between lost it); the last entry written with
  // a provisional insert in it (0: none).
  uint64_t written_seq() const { return written_seq_.load(std::memory_order_seq_cst); }
  uint64_t run_first_seq() const { return run_first_seq_; }
  // Provisional inserts an earlier run of this power domain journaled that
  // replay applied without a recorded backing flush: their backing data is
  // in the device's cache or on its media, not known durable. The first
  // checkpoint must flush the backing devices before it persists them.
  uint64_t kept_on_power() const { return kept_on_power_; }
  uint64_t last_provisional_seq() const {
    return last_provisional_seq_.load(std::memory_order_seq_cst);
  }
  // A backing flush of `dev` that covers entries first_seq..last_seq of this
  // run completed: a pending op, written by the next Commit.
  void JournalBackingFlushed(uint32_t dev, uint64_t first_seq, uint64_t last_seq);

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
  // A soft Commit in two halves, for a caller that writes the entry itself
  // asynchronously (CacheSet::LeadSoftCommit, on a serving reactor). The
  // caller keeps every other Commit and Checkpoint out from Begin to End
  // (CacheSet's commit slot), so entries keep their sequence and commit_mu_
  // is never contended here. Begin takes the pending ops and encodes them
  // (`entry` empty: none, or an error in `sticky`); End says whether the
  // entry reached the store — if not, the ops go back in front of newer
  // ones, as a failed Commit's — and returns what Commit would have.
  struct SoftCommit {
    std::vector<uint8_t> entry;
    Status sticky;  // a shard's error, reported as Commit reports it
    std::vector<std::vector<uint8_t>> taken;
    std::vector<uint32_t> ops;
    std::vector<char> provisional;
    bool any_provisional = false;
  };
  void BeginSoftCommit(SoftCommit* c) EXCLUDES(commit_mu_);
  Status EndSoftCommit(SoftCommit* c, bool written) EXCLUDES(commit_mu_);
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

  // The epoch section of the checkpoint's dirty state (every shard's
  // (dev, epoch, stripe) byte counts and kept versions), in bytes, as of the
  // last Commit or Checkpoint. It grows with the dirty epochs and the kept
  // versions and must fit the journal half a checkpoint writes it into, so
  // the cache stops taking dirty writes while it is past
  // `SetEpochStateBudget` (epoch_state_full; DirtyWriteEngine::Accepts).
  uint64_t epoch_state_bytes() const { return epoch_state_bytes_.load(std::memory_order_relaxed); }
  void SetEpochStateBudget(uint64_t bytes) { epoch_state_budget_.store(bytes, std::memory_order_relaxed); }
  bool epoch_state_full() const {
    return epoch_state_bytes_.load(std::memory_order_relaxed) > epoch_state_budget_.load(std::memory_order_relaxed);
  }

  // Calls fn for every extent, a batch at a time (bounded memory, no lock
  // held while fn runs, so fn may call back into the index). Order: shard by
  // shard, by key within a shard. Concurrent changes may or may not be seen.
  Status ForEach(const std::function<void(const Extent&)>& fn);

  // ---- Without I/O (see the top) ----
  // After a call on this thread returned WouldBlock: whether it named a node
  // to read (false: the call needs a thread that may wait).
  bool HasMissingNode() const;
  // Reads that node on this thread's reactor without waiting, puts it in
  // place, and calls done (on this thread; at once if the store reads
  // synchronously). An error: the node could not be read or decoded.
  void LoadMissing(Callback<void(Status)> done);
  // Writes (and evicts) the dirty nodes that evictions without I/O left
  // over budget. Not on a serving reactor.
  Status WriteOverBudget();

  struct Stats {
    uint64_t extents, nodes, cached_nodes, cached_bytes, node_reads, node_writes, journal_bytes;
    uint64_t node_parks;  // calls that returned WouldBlock (a serving reactor's node miss)
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
    bool journal_provisional GUARDED_BY(mu) = false;  // a provisional insert among them
    Status error GUARDED_BY(mu);  // a failed eviction write, reported by Commit
    // Dirty bytes of this shard's extents: by (dev, stripe), by dev, by bucket.
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> dirty_stripes GUARDED_BY(mu);
    std::map<uint32_t, uint64_t> dirty_devs GUARDED_BY(mu);
    // Hashed: a write updates it on every ack (an ordered map of a few
    // thousand buckets cost 5 % of a writeback write's CPU); sorted when
    // encoded.
    std::unordered_map<uint64_t, uint64_t> dirty_buckets GUARDED_BY(mu);
    // Dirty bytes of the tree by (dev, epoch, stripe); kept versions by
    // (dev, epoch, start) — in dirty_devs and dirty_buckets, not in
    // dirty_stripes (address-order writeback does not write them).
    std::map<std::tuple<uint32_t, uint64_t, uint64_t>, uint64_t> epoch_stripes GUARDED_BY(mu);
    std::map<std::tuple<uint32_t, uint64_t, uint64_t>, Extent> kept GUARDED_BY(mu);
    // The same kept versions by (dev, start, epoch), and the longest one
    // ever kept: every write asks whether its range overlaps one
    // (InvalidateClean), which by `kept`'s order meant visiting all of the
    // device's — 0.7x the IOPS of lba order under sysbench at 48 threads.
    std::set<std::tuple<uint32_t, uint64_t, uint64_t>> kept_by_addr GUARDED_BY(mu);
    uint64_t kept_max_len GUARDED_BY(mu) = 0;
  };
  class ShardLocks;
  static constexpr uint32_t kEpochsMagic = 0x4b454255;  // "UBEK": the checkpoint's epoch section

  ExtentIndex(NodeStore* store, uint32_t nshards, uint64_t stripe, const Options& o);
  uint32_t ShardOf(uint32_t dev, uint64_t offset) const;
  std::vector<uint32_t> ShardsFor(uint32_t dev, uint64_t start, uint64_t end) const;
  Status Mutate(uint32_t dev, uint64_t start, uint64_t end, const Extent* insert, const uint8_t* data,
                const uint64_t* since, bool* inserted, uint64_t* removed_dirty,
                bool provisional = false, const EpochRule* rule = nullptr);
  bool ChangedSince(uint32_t dev, uint64_t start, uint64_t end, uint64_t since) const;
  bool BackingWriteInFlight(uint32_t dev, uint64_t start, uint64_t end) const;
  void MarkChanged(uint32_t dev, uint64_t start, uint64_t end, uint64_t seq);
  Status ApplyJournalOp(const JournalOp& op);
  // Counts `removed` dirty pieces out and `added` (if dirty) in.
  void AccountLocked(Shard* sh, const std::vector<Extent>& removed, const Extent* added)
      REQUIRES(sh->mu);
  void EncodeDirtyLocked(Shard* sh, std::vector<uint8_t>* out) REQUIRES(sh->mu);
  Status DecodeDirty(const std::vector<uint8_t>& blob);
  // Epochs (extent_index_epochs.cpp).
  void AccountKeptLocked(Shard* sh, const Extent& e, int64_t sign) REQUIRES(sh->mu);
  // Counts e in before anything is counted out (rule 15, extent_index_epochs.cpp).
  void KeepLocked(Shard* sh, const Extent& e, bool journal) REQUIRES(sh->mu);
  // `kept` and `kept_by_addr` change together, only here.
  static void KeptAddLocked(Shard* sh, const Extent& k) REQUIRES(sh->mu);
  static void KeptEraseLocked(Shard* sh, const Extent& k) REQUIRES(sh->mu);
  // The kept versions of dev overlapping [start, end), in address order.
  static std::vector<Extent> KeptOverlappingLocked(Shard* sh, uint32_t dev, uint64_t start, uint64_t end)
      REQUIRES(sh->mu);
  void JournalKeepLocked(Shard* sh, const Extent& k) REQUIRES(sh->mu);
  // A dirty piece an insert of `piece` removed that stays kept: an older epoch's.
  static bool Replaced(const Extent& r, const Extent& piece);
  // The dirty pieces an insert of `piece` removed: those of older epochs
  // kept — called before AccountLocked counts them out of the tree (rule
  // 15); JournalReplacedLocked journals the keeps, after the insert op.
  void KeepReplacedLocked(Shard* sh, const std::vector<Extent>& removed, const Extent& piece) REQUIRES(sh->mu);
  void JournalReplacedLocked(Shard* sh, const std::vector<Extent>& removed, const Extent& piece)
      REQUIRES(sh->mu);
  // Drops (journaled) the kept versions of dev overlapping [start, end),
  // keeping the parts outside; *bytes += what was dropped.
  void DropKeptLocked(Shard* sh, uint32_t dev, uint64_t start, uint64_t end, uint64_t* bytes = nullptr)
      REQUIRES(sh->mu);
  bool KeptOverlapsLocked(Shard* sh, uint32_t dev, uint64_t start, uint64_t end) REQUIRES(sh->mu);
  Status ApplyKeptOp(const JournalOp& op);
  // The checkpoint's epoch section of one shard, and its reading (format in
  // extent_index_epochs.cpp); without one (a checkpoint from before epochs)
  // every dirty byte is epoch 0.
  void EncodeEpochsLocked(Shard* sh, std::vector<uint8_t>* out) REQUIRES(sh->mu);
  // What EncodeEpochsLocked would add for this shard.
  static uint64_t EpochStateBytesLocked(Shard* sh) REQUIRES(sh->mu);
  // Stores the sum, and says so in the log when it crosses the budget.
  void NoteEpochState(uint64_t bytes);
  Status DecodeEpochs(const std::vector<uint8_t>& blob, size_t pos);
  enum class Change { kClean, kRemove, kMove, kMoveProvisional };
  // An unconfirmed entry's ops as replay may apply them: false when they
  // cannot be (a data check fails), see Commit.
  bool ConfirmOps(std::vector<JournalOp>* ops) const;
  // Rule 9 at replay, gathered from the whole journal first: per (dev,
  // first_seq) of a run, the last entry a recorded backing flush covers;
  // and the entries written in the power domain replay runs in (between a
  // power-domain op naming `domain` and the next power-domain op), whose
  // provisional inserts no power cut can have undone.
  struct FlushCoverage {
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> flushed;
    std::vector<std::pair<uint64_t, uint64_t>> same_power;  // first..last entry
  };
  static FlushCoverage ScanBackingFlushes(const std::vector<uint8_t>& all, uint64_t root_seq,
                                          uint64_t set_id, const PowerDomain& domain);
  // Entry `seq`'s provisional inserts that no recorded flush covers become
  // invalidations of their ranges, unless the entry was written in this
  // power domain (counted in kept_on_power_).
  void ApplyFlushCoverage(const FlushCoverage& covered, uint64_t seq, std::vector<JournalOp>* ops);
  // Records the power domain this run writes in (the next Commit writes it).
  void JournalPowerDomain();
  // The parts of e's range that still map to e's data: marked clean,
  // removed, or moved to *to's location (dirty flag kept).
  Status ChangeIfSame(const Extent& e, Change how, const Extent* to, uint64_t* changed,
                      const uint8_t* data = nullptr);
  void EvictLocked(Shard* sh) REQUIRES(sh->mu);
  // The shard's tree, set to do I/O or not as the calling thread may.
  ExtentTree* Tree(Shard* sh) REQUIRES(sh->mu);
  // Passes st on; a WouldBlock's missing node is kept for LoadMissing.
  Status NoteMissingLocked(Shard* sh, uint32_t id, Status st) REQUIRES(sh->mu);
  Status ProbeLocked(Shard* sh, uint32_t id, uint32_t dev, uint64_t start, uint64_t end,
                     bool insert) REQUIRES(sh->mu);
  Status ProbeMutationLocked(const ShardLocks& locks, uint32_t dev, uint64_t start, uint64_t end,
                             bool insert);
  // Record one op in the shard's pending journal (nothing when unjournaled).
  void JournalInsertLocked(Shard* sh, const Extent& piece, const uint64_t* hash,
                           bool provisional = false) REQUIRES(sh->mu);
  void JournalInvalidateLocked(Shard* sh, uint32_t id, uint32_t dev, uint64_t start, uint64_t end)
      REQUIRES(sh->mu);
  uint64_t ShardBudget() const;
  // Swaps every shard's pending ops into `c` (Commit and BeginSoftCommit);
  // returns how many.
  uint64_t TakePendingOps(SoftCommit* c) REQUIRES(commit_mu_);
  // The entry taken into `c` is in the store: its sequence and counters.
  void NoteWrittenLocked(const SoftCommit& c) REQUIRES(commit_mu_);
  void ReturnPendingOps(std::vector<std::vector<uint8_t>>* taken, std::vector<uint32_t>* ops,
                        const std::vector<char>& provisional);

  NodeStore* const store_;
  const uint64_t stripe_;
  const uint64_t set_id_;
  const uint64_t bucket_bytes_;
  const bool journaled_;
  const std::function<void(uint64_t, int64_t)> on_dirty_;
  const std::function<bool(const Extent&, uint64_t)> check_data_;
  const std::function<void(const Extent&)> on_replayed_insert_;
  const std::function<void()> wake_writer_;
  std::atomic<bool> writer_woken_{false};
  std::atomic<uint64_t> node_parks_{0};
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> cache_bytes_;
  std::atomic<uint64_t> seq_{0};  // mutation sequence for InsertIfUnchanged
  std::unique_ptr<std::atomic<uint64_t>[]> chunk_seq_;  // last mutation per chunk slot
  std::unique_ptr<std::atomic<uint32_t>[]> chunk_writes_;  // backing writes in flight per chunk slot
  std::atomic<uint64_t> journal_bytes_{0};
  std::atomic<uint64_t> epoch_state_bytes_{0};
  std::atomic<uint64_t> epoch_state_budget_{~uint64_t{0}};
  std::atomic<uint64_t> epoch_state_logged_ns_{0};
  std::atomic<uint64_t> written_seq_{0};
  std::atomic<uint64_t> last_provisional_seq_{0};
  uint64_t run_first_seq_ = 1;  // set by Open, before any other thread sees the index
  uint64_t kept_on_power_ = 0;  // likewise

  Mutex commit_mu_;  // taken before any shard mutex
  uint64_t journal_seq_ GUARDED_BY(commit_mu_) = 0;
  uint64_t generation_ GUARDED_BY(commit_mu_) = 0;
  // Superseded node addresses a stored root may still reach: freed after the
  // next checkpoint.
  std::vector<uint64_t> release_ GUARDED_BY(commit_mu_);
};

}  // namespace ubcache
