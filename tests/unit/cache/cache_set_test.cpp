// SPDX-License-Identifier: Apache-2.0
// CacheSet over RAM devices: what the set keeps for itself, apart from the
// request paths (cached_device_test) and the allocator (bucket_allocator_test).
#include "cache/cache_set.h"

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "backend/mem_device.h"

using namespace ubcache;

TEST_CASE("an unformatted cache set's index keeps no journal however long it is written") {
  // Issue 29 item 4: the RAM index of `serve --cache FILE` (no format) kept
  // every change as a pending journal op that nothing committed, so RSS grew
  // with every write. Nothing replays that index: it must keep none.
  auto cache = std::move(MemDevice::Create("mem:cache", 16 << 20).value());
  CacheSet::Options o;
  o.bucket_size = 64 << 10;
  auto set = std::move(CacheSet::Create(cache.get(), o).value());
  REQUIRE_FALSE(set->persistent());
  ExtentIndex& index = set->index();
  constexpr uint64_t kBlock = 4096, kBlocks = 2048;
  std::vector<uint8_t> data(kBlock, 0x33);
  // Ten passes of 4 KiB writes over a fixed 8 MiB, as a writeback write
  // (dirty, checked) and a writethrough write (clean) leave them.
  for (uint64_t i = 0; i < 10 * kBlocks; i++) {
    uint64_t blk = (i * 2654435761u) % kBlocks;
    Extent e{0, blk * kBlock, kBlock, (1 << 20) + (i % kBlocks) * kBlock, 0, i % 2 == 0};
    REQUIRE(index.Insert(e, e.dirty ? data.data() : nullptr).ok());
  }
  REQUIRE(set->Commit().ok());  // a no-op for this set
  // ExtentIndex::Commit writes every op still pending: none.
  REQUIRE(index.Commit().ok());
  CHECK(index.stats().journal_bytes == 0);
  CHECK(index.stats().extents <= kBlocks);
}
