// SPDX-License-Identifier: Apache-2.0
// The extent index on a serving reactor (extent_index.h, "Without I/O"): a
// call that needs a node not in memory changes nothing and returns
// WouldBlock; LoadMissing reads the node without waiting; the call, run
// again, completes. Meanwhile calls over resident nodes go on.
#include <catch2/catch.hpp>

#include <functional>

#include "btree/extent_index.h"
#include "tests/unit/btree/gated_node_store.h"
#include "tests/unit/btree/index_test_support.h"
#include "util/thread.h"

using namespace ubcache;
using namespace ubcache::testing;

namespace {

constexpr uint32_t kNode = 4096;      // small nodes: two levels per shard below
constexpr uint64_t kExtents = 20000;  // dev 0, block 2i, cache block i

Extent Nth(uint64_t i, uint64_t cache_blk) { return Ext(0, 2 * i, 1, cache_blk); }

// Runs `call` on this (serving) thread until it stops returning WouldBlock,
// releasing the gated reads between passes; returns the passes it took.
int UntilDone(GatedNodeStore& store, ExtentIndex& idx, const std::function<Status()>& call) {
  for (int pass = 1;; pass++) {
    Status st = call();
    if (!st.IsWouldBlock()) {
      INFO(st.ToString());
      REQUIRE(st.ok());
      return pass;
    }
    REQUIRE(idx.HasMissingNode());
    bool loaded = false;
    idx.LoadMissing([&](Status ls) {
      REQUIRE(ls.ok());
      loaded = true;
    });
    REQUIRE(store.gated() == 1);
    store.Release();
    REQUIRE(loaded);
    REQUIRE(pass < 10);
  }
}

// An index of kExtents extents, checkpointed and opened again: only the
// shard roots are in memory.
std::unique_ptr<ExtentIndex> ColdIndex(GatedNodeStore& store, uint64_t cache_bytes) {
  ExtentIndex::Options o;
  o.journaled = false;
  auto idx = MustCreate(&store, o);
  for (uint64_t i = 0; i < kExtents; i++) REQUIRE(idx->Insert(Nth(i, i)).ok());
  auto root = idx->Checkpoint([](const IndexRoot&) { return Status::OK(); });
  REQUIRE(root.ok());
  idx.reset();
  o.cache_bytes = cache_bytes;
  return MustOpen(&store, *root, o);
}

}  // namespace

TEST_CASE("on a serving thread a lookup that misses a node parks while resident lookups go on") {
  GatedNodeStore store(kNode);
  auto idx = ColdIndex(store, 16 * 32 * 1024);
  // Off the serving thread: the hot range's nodes are read synchronously.
  REQUIRE(LookupAll(*idx, 0, 0, 16).size() == 8);
  uint64_t sync_reads = store.sync_reads();

  ServingThreadScope serving;
  const uint64_t far = 15000;  // far from the hot range, not in memory
  std::vector<Extent> out{Nth(1, 1)};
  Status st = idx->Lookup(0, 2 * far * K, K, &out);
  REQUIRE(st.IsWouldBlock());
  CHECK(out.empty());
  REQUIRE(idx->HasMissingNode());
  bool loaded = false;
  idx->LoadMissing([&](Status ls) {
    CHECK(ls.ok());
    loaded = true;
  });
  REQUIRE(store.gated() == 1);
  CHECK_FALSE(loaded);

  // The read is in flight: the hot range answers from memory, many times.
  for (int n = 0; n < 100; n++) {
    auto hot = LookupAll(*idx, 0, 0, 16);
    REQUIRE(hot.size() == 8);
    CHECK(hot[3].cache_offset == 3 * K);
  }
  CHECK(store.gated() == 1);
  CHECK(store.sync_reads() == sync_reads);  // nothing read synchronously on this thread

  store.Release();
  REQUIRE(loaded);
  int passes = UntilDone(store, *idx, [&] { return idx->Lookup(0, 2 * far * K, K, &out); });
  REQUIRE(out.size() == 1);
  CHECK(out[0].cache_offset == far * K);
  CHECK(passes <= 3);  // one node per pass, at most a tree's height
  CHECK(store.sync_reads() == sync_reads);
  CHECK(idx->stats().node_parks >= 1);
}

TEST_CASE("on a serving thread a change that misses a node changes nothing until it can all be made") {
  GatedNodeStore store(kNode);
  auto idx = ColdIndex(store, 16 * 32 * 1024);
  const uint64_t far = 12000;
  // Over two stripes (a stripe is 128 extents here), so two pieces in two shards.
  Extent wide = Ext(0, 2 * far, 300, 900000);
  {
    uint64_t writes = store.writes();
    ServingThreadScope serving;
    Status st = idx->Insert(wide);
    REQUIRE(st.IsWouldBlock());
    CHECK(store.writes() == writes);
  }
  // Not half made: the range still holds its old extents (read off the
  // serving thread, synchronously).
  auto before = LookupAll(*idx, 0, 2 * far, 300);
  REQUIRE(before.size() == 150);
  CHECK(before.front().cache_offset == far * K);
  CHECK(before.back().cache_offset == (far + 149) * K);

  idx = ColdIndex(store, 16 * 32 * 1024);  // cold again
  uint64_t sync_reads = store.sync_reads();
  ServingThreadScope serving;
  UntilDone(store, *idx, [&] { return idx->Insert(wide); });
  auto after = LookupAll(*idx, 0, 2 * far, 300);  // resident now: no pass needed
  REQUIRE(after.size() == 2);  // one piece per stripe
  CHECK(after[0].cache_offset == 900000 * K);
  CHECK(after[0].len + after[1].len == 300 * K);
  CHECK(after[1].cache_offset == 900000 * K + after[0].len);
  CHECK(store.sync_reads() == sync_reads);
}

TEST_CASE("rule 10: a node read raced by a write of its address is dropped, not put in place") {
  // Not checkpointed: the nodes' addresses are fresh, so a changed node is
  // rewritten in place when it is evicted.
  GatedNodeStore store(kNode);
  ExtentIndex::Options o;
  o.journaled = false;
  auto idx = MustCreate(&store, o);
  for (uint64_t i = 0; i < kExtents; i++) REQUIRE(idx->Insert(Nth(i, i)).ok());
  idx->SetCacheBytes(0);
  // Off the serving thread: every dirty node is written and evicted.
  REQUIRE(LookupAll(*idx, 0, 0, 2 * kExtents).size() == kExtents);
  REQUIRE(idx->stats().cached_nodes == idx->shard_count());  // the roots

  const uint64_t far = 15000;
  std::vector<Extent> out;
  bool loaded = false;
  {
    ServingThreadScope serving;
    REQUIRE(idx->Lookup(0, 2 * far * K, K, &out).IsWouldBlock());
    idx->LoadMissing([&](Status ls) {
      CHECK(ls.ok());
      loaded = true;
    });
    REQUIRE(store.gated() == 1);  // its copy of the leaf is taken now
  }
  // Another thread changes that leaf; evicted at once, it is rewritten in place.
  uint64_t writes = store.writes();
  REQUIRE(idx->Insert(Nth(far, 777)).ok());
  REQUIRE(store.writes() > writes);

  ServingThreadScope serving;
  store.Release();
  REQUIRE(loaded);
  // The stale copy was dropped: the lookup misses again, reads the new copy.
  REQUIRE(idx->Lookup(0, 2 * far * K, K, &out).IsWouldBlock());
  UntilDone(store, *idx, [&] { return idx->Lookup(0, 2 * far * K, K, &out); });
  REQUIRE(out.size() == 1);
  CHECK(out[0].cache_offset == 777 * K);
}

TEST_CASE("eviction on a serving thread writes nothing, and wakes the writer for what it left") {
  GatedNodeStore store(kNode);
  int woken = 0;
  ExtentIndex::Options o;
  o.journaled = false;
  o.cache_bytes = 16 * 8 * 1024;
  o.wake_writer = [&] { woken++; };
  auto idx = MustCreate(&store, o);
  {
    ServingThreadScope serving;
    // A new index is all in memory: nothing to read, and nothing written.
    for (uint64_t i = 0; i < kExtents; i++) REQUIRE(idx->Insert(Nth(i, i)).ok());
    CHECK(store.writes() == 0);
    CHECK(store.sync_reads() == 0);
    CHECK(idx->stats().cached_bytes > o.cache_bytes);
    CHECK(woken == 1);  // once, until the writer has run
  }
  REQUIRE(idx->WriteOverBudget().ok());
  CHECK(store.writes() > 0);
  // Within budget but for each shard's root (and the path above a leaf).
  CHECK(idx->stats().cached_bytes < o.cache_bytes + idx->shard_count() * 3 * 16 * 1024);
  CHECK(AllExtents(*idx).size() == kExtents);
}

TEST_CASE("a change too large to make without I/O names no node, for a thread that may wait") {
  GatedNodeStore store(kNode);
  ExtentIndex::Options o;
  o.journaled = false;
  auto idx = MustCreate(&store, o);  // all in memory
  constexpr uint64_t kMany = 3 * kExtents;
  for (uint64_t i = 0; i < kMany; i++) REQUIRE(idx->Insert(Nth(i, i)).ok());
  {
    ServingThreadScope serving;
    // 256 stripes: each shard holds about 16 of them, 2048 extents, past
    // what a change without I/O may hold.
    Status st = idx->Invalidate(0, 0, 256 * 256 * K);
    REQUIRE(st.IsWouldBlock());
    CHECK_FALSE(idx->HasMissingNode());
    CHECK(idx->stats().extents == kMany);
    // A small one in the same place is made at once.
    REQUIRE(idx->Invalidate(0, 0, 4 * K).ok());
  }
  REQUIRE(idx->Invalidate(0, 0, 256 * 256 * K).ok());  // off the serving thread
  CHECK(idx->stats().extents == kMany - 256 * 128);
}
