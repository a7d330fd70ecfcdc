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
// Journal. The cache superblock's journal buckets, written from their
// start as a chain of records, each a whole number of blocks (doc/format.md,
// "Journal records"): block 0 is a start record carrying a random nonce,
// then one record per AppendJournal, written with FUA (durable on return).
// A record is valid when its checksum holds and it carries the set, the
// nonce, the next index and the checksum of the record before it; reading
// stops at the first that is not, so a torn append, or a record left from an
// older journal, is never taken for part of this one. TrimJournal writes a
// new start record (new nonce). The journal is linear: an append that does
// not fit returns NoSpace, and the cache set checkpoints (which trims).
//
// I/O. Every call is synchronous, and the index calls it from reactor
// threads that serve clients (a node evicted under a lookup), where turning
// the caller's own reactor (sync_io.h) would run other requests' callbacks
// inside the index's locks. So the store owns one I/O thread with its own
// reactor; a call posts its request there and waits.
//
// Thread safety: every method, from any thread (one mutex for the slot map,
// one for the journal; I/O runs outside the slot-map lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "backend/block_device.h"
#include "btree/node_store.h"
#include "cache/bucket_allocator.h"
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
  Status AppendJournal(const uint8_t* data, size_t len) override EXCLUDES(jmu_);
  Status ReadJournal(std::vector<uint8_t>* all) override EXCLUDES(jmu_);
  Status TrimJournal() override EXCLUDES(jmu_);
  Status DiscardJournalTail(size_t valid_bytes) override EXCLUDES(jmu_);

  // Reads the journal on the device and positions appends after its last
  // valid record. A journal with no valid start record is empty: a new one
  // is started (ResetJournal).
  Status OpenJournal() EXCLUDES(jmu_);
  // Starts an empty journal (a new start record), whatever is there.
  Status ResetJournal() EXCLUDES(jmu_);
  uint64_t journal_capacity() const { return o_.journal_bytes; }
  uint64_t journal_used() const EXCLUDES(jmu_);  // bytes of records, start record included

  // Allocated node addresses, sorted (for the bucket table).
  std::vector<uint64_t> AllocatedNodes() const EXCLUDES(mu_);
  // Marks `addrs` allocated, on a store with nothing allocated. Each must be
  // a slot of a bucket the allocator has as metadata.
  Status RestoreNodes(const std::vector<uint64_t>& addrs) EXCLUDES(mu_);
  size_t allocated_nodes() const EXCLUDES(mu_);

  // Synchronous I/O on the store's thread, for the cache set's own
  // metadata (superblock, bucket table).
  Status Io(const IoRequest& req);
  const Counters& counters() const { return counters_; }

 private:
  struct Record {  // one valid journal record, as read or written
    uint64_t pos;  // byte offset in the journal area
    uint64_t blocks;
    uint64_t payload_begin;  // offset of its payload in ReadJournal's bytes
    uint64_t payload_len;
  };
  BucketNodeStore(BlockDevice* dev, BucketAllocator* buckets, Options o);
  Status CheckAddr(uint64_t addr) const;
  // Encodes and writes one record at journal byte `pos` (FUA).
  Status WriteRecord(uint64_t pos, uint16_t kind, uint64_t index, uint64_t prev_csum,
                     const uint8_t* payload, size_t len, uint64_t* csum, uint64_t* blocks)
      REQUIRES(jmu_);
  // Reads every valid record into records_/payload; sets the tail.
  Status ScanJournal(std::vector<uint8_t>* payload) REQUIRES(jmu_);
  Status ResetJournalLocked() REQUIRES(jmu_);

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

  mutable Mutex jmu_;
  bool journal_open_ GUARDED_BY(jmu_) = false;
  uint64_t nonce_ GUARDED_BY(jmu_) = 0;
  uint64_t tail_ GUARDED_BY(jmu_) = 0;        // journal byte of the next record
  uint64_t next_index_ GUARDED_BY(jmu_) = 0;  // index of the next record
  uint64_t last_csum_ GUARDED_BY(jmu_) = 0;   // csum of the last valid record
  std::vector<Record> records_ GUARDED_BY(jmu_);  // data records since the start record
  uint64_t payload_bytes_ GUARDED_BY(jmu_) = 0;
};

}  // namespace ubcache
