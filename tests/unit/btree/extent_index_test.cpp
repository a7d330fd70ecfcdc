// SPDX-License-Identifier: Apache-2.0
// The extent index's contract, case by case: exact trimming and splitting,
// clipping on lookup, stripes, InsertIfUnchanged, commit/checkpoint/reopen.
#include "btree/extent_index.h"

#include <catch2/catch.hpp>

#include "btree/mem_node_store.h"
#include "tests/unit/btree/index_test_support.h"

using namespace ubcache;
using namespace ubcache::testing;

using V = std::vector<Extent>;

TEST_CASE("lookup of an empty index finds nothing") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  CHECK(LookupAll(*idx, 0, 0, 100).empty());
}

TEST_CASE("lookup returns an inserted extent exactly") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  REQUIRE(idx->Insert(Ext(1, 10, 4, 500, 3, true)).ok());
  CHECK(LookupAll(*idx, 1, 0, 100) == V{Ext(1, 10, 4, 500, 3, true)});
  CHECK(LookupAll(*idx, 0, 0, 100).empty());  // another device
  CHECK(LookupAll(*idx, 1, 14, 10).empty());  // just after
  CHECK(LookupAll(*idx, 1, 0, 10).empty());   // just before
}

TEST_CASE("lookup clips extents to the range and advances cache_offset") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  REQUIRE(idx->Insert(Ext(0, 10, 10, 100)).ok());
  REQUIRE(idx->Insert(Ext(0, 30, 10, 200)).ok());
  CHECK(LookupAll(*idx, 0, 15, 20) == V{Ext(0, 15, 5, 105), Ext(0, 30, 5, 200)});
  CHECK(LookupAll(*idx, 0, 12, 2) == V{Ext(0, 12, 2, 102)});
}

TEST_CASE("an insert in the middle of an extent leaves two pieces with adjusted offsets") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  REQUIRE(idx->Insert(Ext(0, 0, 16, 1000, 1)).ok());
  REQUIRE(idx->Insert(Ext(0, 4, 4, 50, 2, true)).ok());
  CHECK(LookupAll(*idx, 0, 0, 16) ==
        V{Ext(0, 0, 4, 1000, 1), Ext(0, 4, 4, 50, 2, true), Ext(0, 8, 8, 1008, 1)});
  CHECK(idx->stats().extents == 3);
}

TEST_CASE("an insert over the tail of an extent trims it") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  REQUIRE(idx->Insert(Ext(0, 0, 8, 100)).ok());
  REQUIRE(idx->Insert(Ext(0, 6, 6, 300)).ok());
  CHECK(LookupAll(*idx, 0, 0, 20) == V{Ext(0, 0, 6, 100), Ext(0, 6, 6, 300)});
}

TEST_CASE("an insert over the head of an extent trims it and advances its offset") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  REQUIRE(idx->Insert(Ext(0, 4, 8, 100)).ok());
  REQUIRE(idx->Insert(Ext(0, 0, 6, 300)).ok());
  CHECK(LookupAll(*idx, 0, 0, 20) == V{Ext(0, 0, 6, 300), Ext(0, 6, 6, 102)});
}

TEST_CASE("an insert covering extents removes them and trims the edges") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  REQUIRE(idx->Insert(Ext(0, 0, 4, 100)).ok());
  REQUIRE(idx->Insert(Ext(0, 4, 2, 200)).ok());
  REQUIRE(idx->Insert(Ext(0, 8, 2, 300)).ok());
  REQUIRE(idx->Insert(Ext(0, 10, 4, 400)).ok());
  REQUIRE(idx->Insert(Ext(0, 2, 10, 900)).ok());
  CHECK(LookupAll(*idx, 0, 0, 20) ==
        V{Ext(0, 0, 2, 100), Ext(0, 2, 10, 900), Ext(0, 12, 2, 402)});
  CHECK(idx->stats().extents == 3);
}

TEST_CASE("an insert exactly over an extent replaces it") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  REQUIRE(idx->Insert(Ext(0, 4, 4, 100)).ok());
  REQUIRE(idx->Insert(Ext(0, 4, 4, 200, 7)).ok());
  CHECK(LookupAll(*idx, 0, 0, 20) == V{Ext(0, 4, 4, 200, 7)});
  CHECK(idx->stats().extents == 1);
}

TEST_CASE("invalidate in the middle splits an extent, at the edges trims it") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  REQUIRE(idx->Insert(Ext(0, 0, 16, 100)).ok());
  REQUIRE(idx->Invalidate(0, 4 * K, 4 * K).ok());
  CHECK(LookupAll(*idx, 0, 0, 16) == V{Ext(0, 0, 4, 100), Ext(0, 8, 8, 108)});
  REQUIRE(idx->Invalidate(0, 0, 2 * K).ok());
  REQUIRE(idx->Invalidate(0, 14 * K, 10 * K).ok());
  CHECK(LookupAll(*idx, 0, 0, 16) == V{Ext(0, 2, 2, 102), Ext(0, 8, 6, 108)});
  REQUIRE(idx->Invalidate(0, 0, 100 * K).ok());
  CHECK(LookupAll(*idx, 0, 0, 100).empty());
  CHECK(idx->stats().extents == 0);
}

TEST_CASE("invalidate of one device leaves the others") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  REQUIRE(idx->Insert(Ext(0, 0, 8, 100)).ok());
  REQUIRE(idx->Insert(Ext(1, 0, 8, 200)).ok());
  REQUIRE(idx->Invalidate(0, 0, 8 * K).ok());
  CHECK(LookupAll(*idx, 0, 0, 8).empty());
  CHECK(LookupAll(*idx, 1, 0, 8) == V{Ext(1, 0, 8, 200)});
}

TEST_CASE("extents are split at stripe boundaries and read back contiguous") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);  // 1 MiB stripes = 256 blocks
  REQUIRE(idx->Insert(Ext(0, 250, 300, 1000)).ok());
  CHECK(idx->stats().extents == 3);  // [250,256) [256,512) [512,550)
  CHECK(LookupAll(*idx, 0, 0, 1000) ==
        V{Ext(0, 250, 6, 1000), Ext(0, 256, 256, 1006), Ext(0, 512, 38, 1262)});
  REQUIRE(idx->Invalidate(0, 255 * K, 2 * K).ok());
  CHECK(LookupAll(*idx, 0, 250, 10) ==
        V{Ext(0, 250, 5, 1000), Ext(0, 257, 3, 1007)});
}

TEST_CASE("misaligned or empty ranges are rejected") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  CHECK(idx->Insert(Extent{0, 100, K, 0, 0, false}).IsInvalidArgument());
  CHECK(idx->Insert(Extent{0, 0, 0, 0, 0, false}).IsInvalidArgument());
  CHECK(idx->Invalidate(0, 0, 100).IsInvalidArgument());
  std::vector<Extent> out;
  CHECK(idx->Lookup(0, 0, 0, &out).IsInvalidArgument());
}

TEST_CASE("InsertIfUnchanged inserts when nothing touched the range") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  uint64_t since = idx->Sequence(0, 0, 8 * K);
  REQUIRE(idx->Insert(Ext(0, 1000, 8, 1)).ok());  // elsewhere
  bool inserted = false;
  REQUIRE(idx->InsertIfUnchanged(Ext(0, 0, 8, 100), since, &inserted).ok());
  CHECK(inserted);
  CHECK(LookupAll(*idx, 0, 0, 8) == V{Ext(0, 0, 8, 100)});
}

TEST_CASE("a read miss racing a write never inserts stale data") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  uint64_t since = idx->Sequence(0, 0, 8 * K);
  REQUIRE(idx->Insert(Ext(0, 4, 1, 777)).ok());  // the racing write
  bool inserted = true;
  REQUIRE(idx->InsertIfUnchanged(Ext(0, 0, 8, 100), since, &inserted).ok());
  CHECK_FALSE(inserted);
  CHECK(LookupAll(*idx, 0, 0, 8) == V{Ext(0, 4, 1, 777)});

  since = idx->Sequence(0, 0, 8 * K);
  REQUIRE(idx->Invalidate(0, 0, K).ok());  // a bypassed write
  REQUIRE(idx->InsertIfUnchanged(Ext(0, 0, 8, 100), since, &inserted).ok());
  CHECK_FALSE(inserted);
}

TEST_CASE("checkpoint then reopen gives the same extents") {
  MemNodeStore store(4096);
  IndexRoot root;
  {
    auto idx = MustCreate(&store);
    for (uint64_t i = 0; i < 5000; i++) REQUIRE(idx->Insert(Ext(i % 3, i * 2, 1, i)).ok());
    auto r = idx->Checkpoint();
    REQUIRE(r.ok());
    root = *r;
    CHECK(store.journal_size() == 0);
  }
  auto idx = MustOpen(&store, root);
  CHECK(idx->stats().extents == 5000);
  auto all = AllExtents(*idx);
  REQUIRE(all.size() == 5000);
  CHECK(LookupAll(*idx, 1, 2 * 4, 1) == V{Ext(1, 8, 1, 4)});
}

TEST_CASE("committed operations survive a crash, uncommitted ones vanish") {
  MemNodeStore store(4096);
  IndexRoot root;
  {
    auto idx = MustCreate(&store);
    root = idx->Checkpoint().value();
    REQUIRE(idx->Insert(Ext(0, 0, 8, 100)).ok());
    REQUIRE(idx->Invalidate(0, 2 * K, K).ok());
    REQUIRE(idx->Commit().ok());
    REQUIRE(idx->Insert(Ext(0, 100, 8, 900)).ok());  // never committed
  }  // crash: destroyed without a checkpoint
  auto idx = MustOpen(&store, root);
  CHECK(LookupAll(*idx, 0, 0, 200) == V{Ext(0, 0, 2, 100), Ext(0, 3, 5, 103)});
}

TEST_CASE("IndexRoot round-trips and names the first failed check") {
  IndexRoot r;
  r.node_size = 4096;
  r.stripe_bytes = 1 << 20;
  r.journal_seq = 42;
  r.generation = 7;
  r.shards = {ShardRoot{8192, 2, 1000, 30}, ShardRoot{}};
  auto enc = r.Encode();
  REQUIRE(enc.size() == IndexRoot::EncodedSize(2));
  auto d = IndexRoot::Decode(enc.data(), enc.size());
  REQUIRE(d.ok());
  CHECK(d->journal_seq == 42);
  CHECK(d->generation == 7);
  CHECK(d->shards[0].addr == 8192);
  CHECK(d->shards[0].level == 2);
  CHECK(d->shards[1].addr == kNoNode);
  auto bad = enc;
  bad[60] ^= 1;
  CHECK(IndexRoot::Decode(bad.data(), bad.size()).status().message() == "index root: bad csum");
  bad = enc;
  bad[8] ^= 1;
  CHECK(IndexRoot::Decode(bad.data(), bad.size()).status().message() == "index root: bad magic");
  CHECK(IndexRoot::Decode(enc.data(), 20).status().message() == "index root: short");
}

// Regression: fills used to mark their chunk changed, so two misses filling
// neighbouring blocks of one 64 KiB chunk made each other collide, and a
// warm second pass fell short of all hits.
TEST_CASE("concurrent fills of neighbouring blocks do not collide") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  uint64_t a = idx->Sequence(0, 0, K);
  uint64_t b = idx->Sequence(0, K, K);
  bool inserted = false;
  REQUIRE(idx->InsertIfUnchanged(Ext(0, 0, 1, 100), a, &inserted).ok());
  CHECK(inserted);
  REQUIRE(idx->InsertIfUnchanged(Ext(0, 1, 1, 101), b, &inserted).ok());
  CHECK(inserted);
  CHECK(LookupAll(*idx, 0, 0, 2) == V{Ext(0, 0, 1, 100), Ext(0, 1, 1, 101)});
}

TEST_CASE("a write between Sequence and a fill makes the fill a collision") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  uint64_t since = idx->Sequence(0, 0, K);
  REQUIRE(idx->Insert(Ext(0, 0, 1, 200)).ok());  // the write's new data
  bool inserted = true;
  REQUIRE(idx->InsertIfUnchanged(Ext(0, 0, 1, 100), since, &inserted).ok());
  CHECK_FALSE(inserted);
  CHECK(LookupAll(*idx, 0, 0, 1) == V{Ext(0, 0, 1, 200)});
  since = idx->Sequence(0, 0, K);
  REQUIRE(idx->Invalidate(0, 0, K).ok());  // a bypassed write
  REQUIRE(idx->InsertIfUnchanged(Ext(0, 0, 1, 100), since, &inserted).ok());
  CHECK_FALSE(inserted);
  CHECK(LookupAll(*idx, 0, 0, 1).empty());
}

TEST_CASE("MarkWrite refuses the fills that read before it, with or without the dirty lookup") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  REQUIRE(idx->Insert(Ext(0, 4, 1, 700, 1, /*dirty=*/true)).ok());
  for (bool lookup : {true, false}) {
    uint64_t since = idx->Sequence(0, 0, K);
    bool has_dirty = false;
    REQUIRE(idx->MarkWrite(0, 0, 8 * K, lookup ? &has_dirty : nullptr).ok());
    CHECK(has_dirty == lookup);  // only the lookup says so
    bool inserted = true;
    REQUIRE(idx->InsertIfUnchanged(Ext(0, 0, 1, 100), since, &inserted).ok());
    CHECK_FALSE(inserted);
    // It removes nothing: the dirty copy stays until the write's own insert.
    CHECK(LookupAll(*idx, 0, 0, 8) == V{Ext(0, 4, 1, 700, 1, true)});
  }
  // Another range stays fillable.
  uint64_t since = idx->Sequence(0, 1024 * K, K);
  REQUIRE(idx->MarkWrite(0, 0, 8 * K, nullptr).ok());
  bool inserted = false;
  REQUIRE(idx->InsertIfUnchanged(Ext(0, 1024, 1, 100), since, &inserted).ok());
  CHECK(inserted);
}

// Rule 9's fill half: checked to fail with BackingWriteInFlight returning false.
TEST_CASE("a fill is refused while a backing write over its range is in flight, and taken after it") {
  MemNodeStore store(4096);
  auto idx = MustCreate(&store);
  idx->BackingWriteBegins(0, 0, 2 * K);  // the write is issued, its completion not yet seen
  uint64_t since = idx->Sequence(0, 0, K);
  bool inserted = true;
  REQUIRE(idx->InsertIfUnchanged(Ext(0, 0, 1, 100), since, &inserted).ok());
  CHECK_FALSE(inserted);  // it may have read the write's data
  REQUIRE(idx->InsertIfUnchanged(Ext(1, 0, 1, 100), since, &inserted).ok());
  CHECK(inserted);  // another device's range
  REQUIRE(idx->Invalidate(0, 0, 2 * K).ok());  // its completion
  idx->BackingWriteEnds(0, 0, 2 * K);
  since = idx->Sequence(0, 0, K);
  REQUIRE(idx->InsertIfUnchanged(Ext(0, 0, 1, 100), since, &inserted).ok());
  CHECK(inserted);
}

TEST_CASE("an unjournaled index keeps no pending ops however many changes it takes") {
  // An unformatted cache's index: nothing commits it, so anything it kept
  // per change would grow without bound under sustained writes.
  auto churn = [](ExtentIndex& idx) {
    std::vector<uint8_t> data(K, 0x5a);
    for (uint64_t i = 0; i < 20000; i++) {
      uint64_t blk = (i * 7919) % 4096;
      REQUIRE(idx.Insert(Ext(0, blk, 1, i % 8192, 0, true), data.data()).ok());
      if (i % 3 == 0) REQUIRE(idx.Invalidate(0, ((i * 31) % 4096) * K, K).ok());
      bool has_dirty = false;
      if (i % 5 == 0) REQUIRE(idx.InvalidateClean(0, ((i * 17) % 4096) * K, K, &has_dirty).ok());
    }
  };
  ExtentIndex::Options unjournaled;
  unjournaled.journaled = false;
  MemNodeStore store(4096), journaled_store(4096);
  auto idx = MustCreate(&store, unjournaled);
  auto journaled = MustCreate(&journaled_store);
  churn(*idx);
  churn(*journaled);
  // Commit writes every pending op: an index that kept none writes nothing.
  REQUIRE(idx->Commit().ok());
  REQUIRE(journaled->Commit().ok());
  CHECK(store.journal_size() == 0);
  CHECK(idx->stats().journal_bytes == 0);
  CHECK(journaled_store.journal_size() > 20000 * 16);  // the same churn, journaled
  // The index itself is the same.
  CHECK(AllExtents(*idx) == AllExtents(*journaled));
}
