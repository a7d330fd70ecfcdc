// SPDX-License-Identifier: Apache-2.0
// BucketNodeStore: the extent index's NodeStore on the cache device.
//
// Nodes. A node lives in a slot of `node_size` bytes inside a metadata
// bucket (BucketAllocator::AllocateMetadata); its address is its byte
// offset on the cache device. A bucket goes back to the allocator
// (FreeMetadata) as soon as its last slot is freed. Which slots are taken
// is kept in memory; a clean shutdown saves it in the bucket table
// (AllocatedNodes/RestoreNodes), and an unclean start never needs it (the
// cache set then starts with a fresh index, see cache_set.h).
//
// Journal. The index's journal entries are records of kind kIndex in the
// cache set's Journal (cache/journal.h), which the store owns; the cache
// set appends its own records (bucket generations) to the same chain.
// TrimJournal resets it (through the trim hook when one is set, so that the
// cache set can carry records over atomically with the reset).
//
// I/O. ReadNodeAsync, the serving reactors' one call (the index's node
// misses there, extent_index.h "Without I/O"), submits on the caller's
// reactor and never waits. Every other call is synchronous and made by
// threads that may wait (housekeeping, the journal and writeback threads,
// startup); it must not turn the caller's own reactor (sync_io.h), which
// would run other requests' callbacks inside the index's locks. So the
// store owns one I/O thread with its own reactor; a call posts its request
// there and waits (AssertMayBlock: never on a serving reactor).
//
// Thread safety: every method, from any thread (one mutex for the slot map,
// one for the journal; I/O runs outside the slot-map lock).
// Lock order: mu_ (the slot map), then the allocator's locks —
// AllocNode/FreeNode call AllocateMetadata/FreeMetadata under it, and an
// allocation may journal bucket generations (CacheSet::gen_mu_, then the
// Journal's lock). So no caller may hold gen_mu_ or the journal's lock
// when it calls AllocNode, AllocatedNodes or RestoreNodes. Io() takes only
// its own completion's lock.
#pragma once

#include <atomic>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "backend/block_device.h"
#include "btree/node_store.h"
#include "cache/bucket_allocator.h"
#include "cache/journal.h"
#include "util/status.h"
#include "util/thread_annotations.h"

namespace ubcache {

class BucketNodeStore final : public NodeStore {
 public:
  struct Options {
    uint32_t node_size = 64 * 1024;  // divides the bucket size; multiple of block_size
    uint32_t block_size = 4096;      // journal record granularity
    uint64_t journal_offset = 0;     // bytes on the device
    uint64_t journal_bytes = 0;
    uint64_t set_id = 0;             // stamped into journal records
  };
  struct Counters {
    std::atomic<uint64_t> node_reads{0}, node_writes{0};
    std::atomic<uint64_t> bytes_read{0}, bytes_written{0};
    std::atomic<uint64_t> journal_appends{0};
    std::atomic<uint64_t> io_thread_calls{0};  // synchronous I/O through the I/O thread (IoOn)
  };

  // Starts the I/O thread. The journal is unusable until OpenJournal() or
  // ResetJournal() succeeds.
  static Result<std::unique_ptr<BucketNodeStore>> Create(BlockDevice* dev,
                                                         BucketAllocator* buckets, Options o);
  ~BucketNodeStore() override;

  uint32_t node_size() const override { return o_.node_size; }
  Result<uint64_t> AllocNode() override EXCLUDES(mu_);
  void FreeNode(uint64_t addr) override EXCLUDES(mu_);
  Status WriteNode(uint64_t addr, const uint8_t* data) override;
  Status ReadNode(uint64_t addr, uint8_t* data) override;
  // On the calling thread's reactor; synchronously (ReadNode) on a thread
  // without one.
  void ReadNodeAsync(uint64_t addr, NodeReadDone done) override;
  Status AppendJournal(const uint8_t* data, size_t len) override;
  Status AppendJournalSoft(const uint8_t* data, size_t len) override;
  Status SyncJournal() override { return journal_.Sync(); }
  // An index entry appended soft on the calling reactor's ring, after
  // journal().BeginAsync() succeeded (Journal::AppendAsync): no hop through
  // the I/O thread. `done` runs on this reactor once the record is written
  // (or at once if it cannot be).
  void AppendJournalSoftAsync(const std::vector<uint8_t>& entry, IoDone done);
  Status ReadJournal(std::vector<uint8_t>* all) override;
  Status ReadJournal(std::vector<uint8_t>* all, size_t* unconfirmed) override;
  Status TrimJournal() override;
  Status DiscardJournalTail(size_t valid_bytes) override;

  // Reads the journal on the device and positions appends after its last
  // valid record. A journal with no valid start record is empty: a new one
  // is started (ResetJournal).
  Status OpenJournal();
  // Starts an empty journal (a new start record), whatever is there.
  Status ResetJournal();
  Journal& journal() { return journal_; }
  uint64_t journal_capacity() const { return journal_.capacity(); }
  uint64_t journal_used() const { return journal_.used(); }  // start record included
  // TrimJournal calls this instead of journal().Reset() when set.
  void SetTrimHook(std::function<Status()> hook) { trim_hook_ = std::move(hook); }

  // Allocated node addresses, sorted (for the bucket table).
  std::vector<uint64_t> AllocatedNodes() const EXCLUDES(mu_);
  // Marks `addrs` allocated, on a store with nothing allocated. Each must be
  // a slot of a bucket the allocator has as metadata.
  Status RestoreNodes(const std::vector<uint64_t>& addrs) EXCLUDES(mu_);
  size_t allocated_nodes() const EXCLUDES(mu_);

  // Synchronous I/O on the store's thread, for the cache set's own
  // metadata (superblock, bucket table).
  Status Io(const IoRequest& req) { return IoOn(dev_, req); }
  // The same on another device, through the same I/O thread (a checkpoint's
  // backing flushes, rule 9).
  Status IoOn(BlockDevice* dev, const IoRequest& req);
  const Counters& counters() const { return counters_; }

 private:
  BucketNodeStore(BlockDevice* dev, BucketAllocator* buckets, Options o);
  Status CheckAddr(uint64_t addr) const;

  BlockDevice* const dev_;
  BucketAllocator* const buckets_;
  const Options o_;
  const uint32_t slots_per_bucket_;
  Counters counters_;
  std::unique_ptr<Reactor> reactor_;
  std::thread io_thread_;

  mutable Mutex mu_;
  std::map<uint32_t, std::vector<bool>> used_ GUARDED_BY(mu_);  // metadata bucket -> slots
  std::set<uint32_t> partial_ GUARDED_BY(mu_);  // buckets with a free slot
  size_t nodes_ GUARDED_BY(mu_) = 0;

  Journal journal_;
  std::function<Status()> trim_hook_;
};

}  // namespace ubcache
