// SPDX-License-Identifier: Apache-2.0
// CacheIo: the allocator, cache-device and index calls the engines share:
// cache space for a range, a timed write of a copy to it, the buckets'
// release after the insert, and an acknowledgement after a commit.
//
// Ordering rule 1 (doc/design.md), its request-path half: an extent is
// inserted only after its data write completed, and its bucket stays pinned
// until then — every caller releases the buckets (ReleaseBuckets) after the
// insert, never before: a reclaim in between would bump the generation
// under the new extent, which would then read as stale.
//
// Thread safety: reactor threads; the set's objects are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "backend/block_device.h"
#include "btree/extent.h"
#include "util/callback.h"

namespace ubcache {

class CacheSet;

class CacheIo {
 public:
  CacheIo(CacheSet* set, uint32_t dev) : set_(set), dev_(dev) {}

  // Pieces of a range go to the cache at most this long (one bucket).
  uint64_t piece_bytes() const;
  // Cache space for [start, start+len), len <= piece_bytes(), pinned until
  // ReleaseBuckets. False when the cache is full of what it cannot drop
  // (counted in cache_full_bypasses), or, with *wait set, when a serving
  // reactor finds no bucket ready yet (reclaimed buckets wait for their
  // generations to be journaled; BucketAllocator::ParkForSpace).
  bool AllocatePiece(uint64_t start, uint64_t len, bool dirty, Extent* out, bool* wait = nullptr);
  // Writes a copy of e's data (at `data`) to the cache device: done(ok).
  // Its latency feeds congestion and service time; its error counts toward
  // io_error_limit.
  void WriteCache(const Extent& e, const uint8_t* data, Callback<void(bool)> done);
  // After the extents' insert (or instead of it): their buckets may be reclaimed.
  void ReleaseBuckets(const std::vector<Extent>& extents);
  // Acknowledges `done` with `st`, after a journal commit when `commit` and `st` is OK.
  void AckAfterCommit(IoDone done, Status st, bool commit);

  uint64_t cache_full_bypasses() const {
    return cache_full_bypasses_.load(std::memory_order_relaxed);
  }
  // AllocatePiece calls that found no bucket ready on a serving reactor.
  uint64_t space_waits() const { return space_waits_.load(std::memory_order_relaxed); }

 private:
  CacheSet* const set_;
  const uint32_t dev_;
  std::atomic<uint64_t> cache_full_bypasses_{0};
  std::atomic<uint64_t> space_waits_{0};
};

}  // namespace ubcache
