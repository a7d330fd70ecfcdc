// CacheSet: one cache device and what is shared by every backing device in
// front of which it sits — the buckets, the extent index, the congestion
// score, the knobs of the set and a housekeeping thread.
//
// The index lives in a NodeStore. Until the on-device node store lands, the
// set keeps it in memory (MemNodeStore): the cache is then valid for one
// daemon run, and a restart starts cold — correct (DESIGN.md §5 allows
// dropping cache contents, never serving stale data), just not warm.
//
// Thread safety: members are thread-safe objects; the housekeeping thread
// commits the journal, checkpoints when it grows, and decays bucket
// priorities.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/block_device.h"
#include "btree/extent_index.h"
#include "btree/node_store.h"
#include "cache/bucket_allocator.h"
#include "cache/congestion.h"
#include "cache/knobs.h"
#include "util/status.h"

namespace ubcache {

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
  ~CacheSet();

  BlockDevice* cache_dev() const { return cache_dev_; }
  BucketAllocator& buckets() { return *buckets_; }
  ExtentIndex& index() { return *index_; }
  Congestion& congestion() { return congestion_; }
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
  Result<uint64_t> RunGc();
  uint64_t gc_runs() const { return gc_runs_.load(std::memory_order_relaxed); }

 private:
  CacheSet(BlockDevice* cache_dev, Options o) : cache_dev_(cache_dev), o_(o) {}
  void Housekeeping();

  BlockDevice* cache_dev_;
  Options o_;
  std::unique_ptr<BucketAllocator> buckets_;
  std::unique_ptr<NodeStore> store_;
  std::unique_ptr<ExtentIndex> index_;
  Congestion congestion_;
  CacheKnobs knobs_;
  std::mutex gc_mu_;  // one GC at a time
  std::atomic<uint64_t> gc_runs_{0};
  std::mutex hk_mu_;
  std::condition_variable hk_cv_;
  bool hk_stop_ = false;
  std::thread hk_;
};

}  // namespace ubcache
