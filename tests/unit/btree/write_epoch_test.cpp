// SPDX-License-Identifier: Apache-2.0
// Write epochs in the index (doc/design.md rules 11-12): a dirty insert
// takes its device's epoch, an insert of a later epoch keeps the older
// dirty piece it replaces, and epochs and kept versions survive the
// journal, the nodes and the checkpoint's dirty state.
#include <catch2/catch.hpp>

#include <map>

#include "btree/extent_index.h"
#include "btree/journal_format.h"
#include "btree/mem_node_store.h"
#include "btree/node_format.h"
#include "tests/unit/btree/index_test_support.h"
#include "util/endian.h"
#include "util/hash.h"

using namespace ubcache;
using namespace ubcache::testing;

TEST_CASE("a leaf entry packs a 48-bit epoch, and a version 1 node reads with epoch 0") {
  constexpr uint32_t kSize = 1024;
  std::vector<uint8_t> buf(kSize);
  Extent e = Ext(2, 10, 3, 500, 7, true);
  e.epoch = 0xabcdef123456;
  Extent big = Ext(2, 20, 1, (uint64_t{1} << 40) / K, 1, true);
  big.epoch = kMaxEpoch;
  EncodeLeafNode(buf.data(), kSize, 0, 1, 0x2000, {e, big});
  DecodedNode d;
  REQUIRE(DecodeNode(buf.data(), kSize, {0x2000, 0, 0}, &d).ok());
  REQUIRE(d.extents.size() == 2);
  CHECK(d.extents[0] == e);
  CHECK(d.extents[1] == big);
  // Written before epochs: version 1, the spare bits zero.
  Extent old = Ext(1, 4, 2, 9, 3, true);
  EncodeLeafNode(buf.data(), kSize, 0, 1, 0x2000, {old});
  StoreLE16(buf.data() + 12, 1);
  StoreLE64(buf.data(), Hash64(buf.data() + 8, kNodeHeaderSize - 8 + kLeafEntrySize));
  REQUIRE(DecodeNode(buf.data(), kSize, {0x2000, 0, 0}, &d).ok());
  REQUIRE(d.extents.size() == 1);
  CHECK(d.extents[0] == old);
  CHECK(d.extents[0].epoch == 0);
}

TEST_CASE("journal ops carry epochs and kept versions") {
  std::vector<uint8_t> payload;
  Extent e = Ext(3, 10, 2, 77, 9, true);
  e.epoch = 41;
  uint64_t hash = 0x1234;
  AppendInsertOp(&payload, e, &hash);
  AppendInsertOp(&payload, Ext(3, 12, 1, 80));  // clean: no epoch
  Extent k = Ext(3, 10, 1, 60, 8, true);
  k.epoch = 40;
  AppendKeepOp(&payload, k);
  AppendUnkeepOp(&payload, 3, 39, 20 * K);
  auto entry = EncodeJournalEntry(5, 4, payload);
  size_t len = 0;
  uint64_t seq = 0;
  std::vector<JournalOp> ops;
  Status st = DecodeJournalEntry(entry.data(), entry.size(), &len, &seq, &ops);
  INFO(st.ToString());
  REQUIRE(st.ok());
  REQUIRE(ops.size() == 4);
  CHECK(ops[0].extent == e);
  CHECK(ops[0].checked);
  CHECK(ops[0].data_hash == 0x1234);
  CHECK(ops[1].extent == Ext(3, 12, 1, 80));
  CHECK(ops[2].type == JournalOp::Type::kKeep);
  CHECK(ops[2].extent == k);
  CHECK(ops[3].type == JournalOp::Type::kUnkeep);
  CHECK(ops[3].extent.dev == 3);
  CHECK(ops[3].extent.epoch == 39);
  CHECK(ops[3].extent.start == 20 * K);
}

// The two journal extensions side by side (doc/format.md): epochs (insert
// flag bit 2, op kinds 3 and 4) and h2's backing-flush records (insert flag
// bit 7, op kind 16). A decoder that knew only one of them refuses the entry.
TEST_CASE("epoch ops and provisional inserts and backing-flushed ops share one entry") {
  std::vector<uint8_t> payload;
  Extent e = Ext(3, 10, 2, 77, 9, true);
  e.epoch = 41;
  uint64_t hash = 0x1234;
  AppendInsertOp(&payload, e, &hash);
  uint64_t clean_hash = 0x5678;
  AppendInsertOp(&payload, Ext(3, 12, 1, 80), &clean_hash, /*provisional=*/true);
  Extent k = Ext(3, 10, 1, 60, 8, true);
  k.epoch = 40;
  AppendKeepOp(&payload, k);
  AppendUnkeepOp(&payload, 3, 39, 20 * K);
  AppendBackingFlushedOp(&payload, 3, 2, 5);
  auto entry = EncodeJournalEntry(5, 5, payload);
  size_t len = 0;
  uint64_t seq = 0;
  std::vector<JournalOp> ops;
  Status st = DecodeJournalEntry(entry.data(), entry.size(), &len, &seq, &ops);
  INFO(st.ToString());
  REQUIRE(st.ok());
  REQUIRE(ops.size() == 5);
  CHECK(ops[0].extent == e);
  CHECK(ops[0].extent.epoch == 41);
  CHECK(!ops[0].provisional);
  CHECK(ops[0].data_hash == 0x1234);
  CHECK(ops[1].extent == Ext(3, 12, 1, 80));
  CHECK(ops[1].extent.epoch == 0);
  CHECK(ops[1].provisional);
  CHECK(ops[1].data_hash == 0x5678);
  CHECK(ops[2].type == JournalOp::Type::kKeep);
  CHECK(ops[2].extent == k);
  CHECK(ops[3].type == JournalOp::Type::kUnkeep);
  CHECK(ops[3].extent.epoch == 39);
  CHECK(ops[4].type == JournalOp::Type::kBackingFlushed);
  CHECK(ops[4].first_seq == 2);
  CHECK(ops[4].last_seq == 5);
}

namespace {

struct EpochIndex {
  MemNodeStore store{1024};
  IndexRoot root;
  std::vector<uint8_t> dirty;  // the checkpoint's dirty state
  std::unique_ptr<ExtentIndex> idx;
  WriteEpoch epoch;
  EpochRule keep{&epoch, true};
  EpochRule drop{&epoch, false};
  EpochIndex() {
    idx = MustCreate(&store);
    Checkpoint();
  }
  void Checkpoint() {
    auto r = idx->Checkpoint(ExtentIndex::PersistStateFn(
        [this](const IndexRoot&, const ExtentIndex::CheckpointState& s) {
          dirty = s.dirty;
          return Status::OK();
        }));
    REQUIRE(r.ok());
    root = *r;
  }
  void CrashAndReopen() {
    idx.reset();
    auto r = ExtentIndex::Open(&store, root, {}, &dirty);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    idx = std::move(r).value();
  }
  void Write(uint64_t start_blk, uint64_t len_blk, uint64_t cache_blk, const EpochRule* rule) {
    REQUIRE(idx->Insert(Ext(0, start_blk, len_blk, cache_blk, 0, true), nullptr, /*provisional=*/false, rule).ok());
  }
};

}  // namespace

TEST_CASE("an overwrite in a later epoch keeps the older version until it is unkept") {
  EpochIndex f;
  f.Write(0, 4, 100, &f.keep);  // epoch 1
  f.Write(2, 1, 200, &f.keep);  // same epoch: the old block is simply replaced
  CHECK(f.idx->KeptVersions(0, 1, 0, 1 << 20).empty());
  f.epoch.Close();
  f.Write(1, 2, 300, &f.keep);  // epoch 2 over [1, 3): [1,2)@101 and [2,3)@200 kept
  auto tree = LookupAll(*f.idx, 0, 0, 4);
  REQUIRE(tree.size() == 3);
  CHECK(tree[1].epoch == 2);
  CHECK(tree[0].epoch == 1);
  auto kept = f.idx->KeptVersions(0, 1, 0, 1 << 20);
  REQUIRE(kept.size() == 2);
  CHECK(kept[0].start == 1 * K);
  CHECK(kept[0].cache_offset == 101 * K);
  CHECK(kept[1].cache_offset == 200 * K);
  CHECK(f.idx->OldestEpoch(0) == std::optional<uint64_t>(1));
  CHECK(f.idx->NewestEpoch(0) == 2);
  CHECK(f.idx->DirtyBytes(0) == 6 * K);  // 4 in the tree, 2 kept
  CHECK(f.idx->EpochStripes(0, 1, 10) == std::vector<uint64_t>{0});
  // Writeback wrote epoch 1: its tree extents cleaned, its kept versions unkept.
  uint64_t n = 0;
  REQUIRE(f.idx->Unkeep(kept[0], &n).ok());
  CHECK(n == K);
  REQUIRE(f.idx->Unkeep(kept[1], &n).ok());
  for (const Extent& e : LookupAll(*f.idx, 0, 0, 4))
    if (e.epoch == 1) REQUIRE(f.idx->MarkClean(e, &n).ok());
  CHECK(f.idx->OldestEpoch(0) == std::optional<uint64_t>(2));
  CHECK(f.idx->DirtyBytes(0) == 2 * K);
}

TEST_CASE("lba order keeps nothing, and a clean write or an invalidation drops kept versions") {
  EpochIndex f;
  f.Write(0, 2, 100, &f.drop);
  f.epoch.Close();
  f.Write(0, 2, 200, &f.drop);
  CHECK(f.idx->KeptVersions(0, 1, 0, 1 << 20).empty());
  f.epoch.Close();
  f.Write(0, 2, 300, &f.keep);  // keeps [0,2)@200 of epoch 2
  REQUIRE(f.idx->KeptVersions(0, 2, 0, 1 << 20).size() == 1);
  REQUIRE(f.idx->Invalidate(0, 1 * K, 4 * K).ok());  // the right half goes to the backing device
  auto kept = f.idx->KeptVersions(0, 2, 0, 1 << 20);
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].start == 0);
  CHECK(kept[0].len == K);
  REQUIRE(f.idx->Insert(Ext(0, 0, 1, 400)).ok());  // clean data over it
  CHECK(f.idx->KeptVersions(0, 2, 0, 1 << 20).empty());
  CHECK(f.idx->DirtyBytes(0) == 0);
}

TEST_CASE("epochs and kept versions survive the journal and the checkpoint") {
  EpochIndex f;
  f.Write(0, 4, 100, &f.keep);
  f.epoch.Close();
  f.Write(1, 1, 200, &f.keep);
  REQUIRE(f.idx->Commit().ok());
  f.CrashAndReopen();  // from the journal
  auto kept = f.idx->KeptVersions(0, 1, 0, 1 << 20);
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].cache_offset == 101 * K);
  CHECK(LookupAll(*f.idx, 0, 1, 1)[0].epoch == 2);
  CHECK(f.idx->NewestEpoch(0) == 2);
  CHECK(f.idx->DirtyBytes(0) == 5 * K);
  f.Checkpoint();
  f.CrashAndReopen();  // from the checkpoint's dirty state and nodes
  CHECK(f.idx->KeptVersions(0, 1, 0, 1 << 20) == kept);
  CHECK(f.idx->EpochStripes(0, 2, 10) == std::vector<uint64_t>{0});
  CHECK(f.idx->OldestEpoch(0) == std::optional<uint64_t>(1));
  CHECK(f.idx->DirtyBytes(0) == 5 * K);
  uint64_t n = 0;
  REQUIRE(f.idx->Unkeep(kept[0], &n).ok());
  REQUIRE(f.idx->Commit().ok());
  f.CrashAndReopen();  // the unkeep replayed over the checkpoint
  CHECK(f.idx->KeptVersions(0, 1, 0, 1 << 20).empty());
  CHECK(f.idx->DirtyBytes(0) == 4 * K);
}

// Rule 15: a bucket's dirty count (what keeps BucketAllocator from
// reclaiming it; the refill thread reads it without the shard lock) never
// passes through zero while its data stays needed. Broken on purpose to see
// this fail: in ExtentIndex::Mutate, KeepReplacedLocked moved after
// AccountLocked (the order of the first epochs commit) — the kept bucket's
// count then went 4K -> 0 -> 4K, the window in which a refill reclaimed it
// and writeback was stuck on that epoch for good (120-writeback-crash's
// hang). Same for a kept version split by an invalidation (DropKeptLocked
// counting x out before its remnants in).
TEST_CASE("keeping a replaced piece never takes its bucket's dirty count through zero") {
  constexpr uint64_t kBucket = 64 * K;
  std::map<uint64_t, int64_t> count;
  std::map<uint64_t, int64_t> low;  // the lowest count a bucket had after it first went dirty
  ExtentIndex::Options o;
  o.bucket_bytes = kBucket;
  o.on_dirty = [&](uint64_t b, int64_t delta) {
    count[b] += delta;
    low[b] = low.count(b) ? std::min(low[b], count[b]) : count[b];
  };
  MemNodeStore store{1024};
  auto idx = MustCreate(&store, o);
  WriteEpoch epoch;
  EpochRule keep{&epoch, true};
  // Epoch 1: blocks [0, 4) into bucket 1 (cache blocks 64..68).
  REQUIRE(idx->Insert(Ext(0, 0, 4, 64, 0, true), nullptr, false, &keep).ok());
  epoch.Close();
  // Epoch 2 over all of it, into bucket 2: the epoch 1 piece is kept, and
  // bucket 1 still holds the only copy of it.
  REQUIRE(idx->Insert(Ext(0, 0, 4, 128, 0, true), nullptr, false, &keep).ok());
  CHECK(count[1] == 4 * K);
  CHECK(low[1] == 4 * K);
  // An invalidation of the middle splits the kept version: the remnants
  // stay in bucket 1, which must not look empty meanwhile either.
  REQUIRE(idx->Invalidate(0, 1 * K, 2 * K).ok());
  CHECK(count[1] == 2 * K);
  CHECK(low[1] == 2 * K);
  auto kept = idx->KeptVersions(0, 1, 0, 1 << 20);
  REQUIRE(kept.size() == 2);
  uint64_t n = 0;
  REQUIRE(idx->Unkeep(kept[0], &n).ok());
  REQUIRE(idx->Unkeep(kept[1], &n).ok());
  CHECK(count[1] == 0);
}
