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
// (writeback is the next issue; until then it behaves as writethrough.)
//
// Bypass: bcache's check_should_bypass — a request whose stream (see
// SequentialDetector) reaches sequential_cutoff, or the congested cutoff
// while the cache device is slow, is not inserted.
//
// Detach/Attach (ctl detach / attach): while detached, reads go straight to
// the backing device without looking at the index, and writes go to the
// backing device only, invalidating their range before and after as a
// bypassed write does. Detach drops this device's extents from the index;
// Attach drops them again (a write in flight across Detach may have inserted
// one), then caching resumes. Either takes effect on the next request.
//
// Thread safety: any reactor thread; Detach/Attach from any thread. Per-request state lives in the
// request; shared state is in thread-safe objects (index shards, bucket
// allocator, atomics); stream detection is per reactor thread.
#pragma once

#include <array>
#include <memory>

#include "backend/block_device.h"
#include "cache/cache_set.h"
#include "cache/sequential_detector.h"
#include "cache/stats.h"

namespace ubcache {

class CachedDevice final : public BlockDevice {
 public:
  // Client byte N is byte N of `backing` (an OffsetDevice past a superblock).
  CachedDevice(std::string spec, CacheSet* set, uint32_t dev_index, BlockDevice* backing);
  std::string Describe() const override;

  CacheStats& stats() { return stats_; }
  Status Detach();
  Status Attach();
  bool attached() const { return attached_.load(std::memory_order_acquire); }
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
  bool ShouldBypass(const IoRequest& req, bool write);
  void DoRead(const IoRequest& req, IoDone done, bool prefetch = false);
  void DoWrite(const IoRequest& req, IoDone done);
  void DoFlush(IoDone done);
  void DoDiscard(const IoRequest& req, IoDone done);
  // Copies [start, start+len) of `data` into the cache and inserts it if
  // the range has not changed since `since`.
  void Fill(uint64_t start, uint64_t len, const uint8_t* data, uint64_t since);
  void ReadBacking(ReadOp* op, uint64_t start, uint64_t len, bool was_hit);
  void PieceDone(ReadOp* op, Status st);
  // Invalidates this device's whole range, a bounded step at a time so no
  // index shard is held for long.
  Status DropExtents();

  CacheSet* set_;
  uint32_t dev_;
  BlockDevice* backing_;
  CacheStats stats_;
  std::atomic<bool> attached_{true};
  std::array<std::unique_ptr<SequentialDetector>, Reactor::kMaxReactors> detectors_;
};

}  // namespace ubcache
