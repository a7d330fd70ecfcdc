// SPDX-License-Identifier: Apache-2.0
// Journal entries and replay: checksums, sequence numbers, the torn tail of a
// crash, and entries a checkpoint already contains.
#include <catch2/catch.hpp>

#include "btree/extent_index.h"
#include "btree/journal_format.h"
#include "btree/mem_node_store.h"
#include "tests/unit/btree/index_test_support.h"
#include "util/endian.h"
#include "util/hash.h"
#include "util/power_domain.h"

#include <map>

using namespace ubcache;
using namespace ubcache::testing;

using V = std::vector<Extent>;

TEST_CASE("a journal entry round-trips its ops") {
  std::vector<uint8_t> payload;
  AppendInsertOp(&payload, Ext(3, 10, 2, 77, 9, true));
  AppendInvalidateOp(&payload, 5, 2, 4 * K, 40 * K);
  auto entry = EncodeJournalEntry(17, 2, payload);
  size_t len = 0;
  uint64_t seq = 0;
  std::vector<JournalOp> ops;
  REQUIRE(DecodeJournalEntry(entry.data(), entry.size(), &len, &seq, &ops).ok());
  CHECK(len == entry.size());
  CHECK(seq == 17);
  REQUIRE(ops.size() == 2);
  CHECK(ops[0].type == JournalOp::Type::kInsert);
  CHECK(ops[0].extent == Ext(3, 10, 2, 77, 9, true));
  CHECK(ops[1].type == JournalOp::Type::kInvalidate);
  CHECK(ops[1].shard == 5);
  CHECK(ops[1].extent.start == 4 * K);
  CHECK(ops[1].extent.len == 36 * K);
}

TEST_CASE("journal entry validation names the first failed check") {
  std::vector<uint8_t> payload;
  AppendInsertOp(&payload, Ext(0, 0, 1, 1));
  auto good = EncodeJournalEntry(1, 1, payload);
  auto err = [](const std::vector<uint8_t>& e) {
    size_t len;
    uint64_t seq;
    std::vector<JournalOp> ops;
    Status st = DecodeJournalEntry(e.data(), e.size(), &len, &seq, &ops);
    return st.ok() ? std::string("ok") : st.message();
  };
  CHECK(err(good) == "ok");
  CHECK(err(std::vector<uint8_t>(good.begin(), good.begin() + 20)) == "journal: short header");
  auto b = good;
  b[9] ^= 1;
  CHECK(err(b) == "journal: bad magic");
  b = good;
  b[12] = 2;
  CHECK(err(b) == "journal: bad version");
  CHECK(err(std::vector<uint8_t>(good.begin(), good.end() - 1)) == "journal: bad length");
  b = good;
  b.back() ^= 1;
  CHECK(err(b) == "journal: bad csum");
  CHECK(err(EncodeJournalEntry(1, 2, payload)) == "journal: bad op count");
  CHECK(err(EncodeJournalEntry(1, 1, payload, 0xabc)) == "journal: wrong set");
  CHECK(err(EncodeJournalEntry(1, 1, {9, 9, 9})) == "journal: bad op");
}

namespace {

struct Fixture {
  MemNodeStore store{1024};
  IndexRoot root;
  std::unique_ptr<ExtentIndex> idx;
  Fixture() {
    idx = MustCreate(&store);
    root = idx->Checkpoint().value();
  }
  // kill -9: the devices keep what they were given.
  void CrashAndReopen() {
    idx.reset();
    idx = MustOpen(&store, root);
  }
  // A power cut: the backing devices' caches are lost too.
  void PowerCutAndReopen() {
    NewPowerDomain();
    CrashAndReopen();
  }
};

}  // namespace

TEST_CASE("replay stops at a torn last entry and applies everything before it") {
  Fixture f;
  REQUIRE(f.idx->Insert(Ext(0, 0, 4, 100)).ok());
  REQUIRE(f.idx->Commit().ok());
  size_t first = f.store.journal_size();
  REQUIRE(f.idx->Insert(Ext(0, 10, 4, 200)).ok());
  REQUIRE(f.idx->Commit().ok());
  f.store.TruncateJournal(f.store.journal_size() - 3);  // the second append was torn
  f.CrashAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 0, 4, 100)});
  CHECK(f.store.journal_size() == first);  // the torn tail is discarded
}

TEST_CASE("nothing after a corrupt entry is applied, even a valid-looking one") {
  Fixture f;
  REQUIRE(f.idx->Insert(Ext(0, 0, 4, 100)).ok());
  REQUIRE(f.idx->Commit().ok());
  size_t first = f.store.journal_size();
  REQUIRE(f.idx->Insert(Ext(0, 10, 4, 200)).ok());
  REQUIRE(f.idx->Commit().ok());
  REQUIRE(f.idx->Insert(Ext(0, 20, 4, 300)).ok());
  REQUIRE(f.idx->Commit().ok());
  std::vector<uint8_t> j;
  REQUIRE(f.store.ReadJournal(&j).ok());
  j[first + 40] ^= 0xff;  // inside the second entry's payload
  f.store.TruncateJournal(0);
  f.store.AppendJournalGarbage(j);
  f.CrashAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 0, 4, 100)});
}

TEST_CASE("commits after a discarded torn tail survive the next crash") {
  Fixture f;
  REQUIRE(f.idx->Insert(Ext(0, 0, 4, 100)).ok());
  REQUIRE(f.idx->Commit().ok());
  f.store.AppendJournalGarbage({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  f.CrashAndReopen();
  REQUIRE(f.idx->Insert(Ext(0, 10, 4, 200)).ok());
  REQUIRE(f.idx->Commit().ok());
  f.CrashAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 0, 4, 100), Ext(0, 10, 4, 200)});
}

TEST_CASE("metadata of an earlier format of the device is never taken for live") {
  MemNodeStore store(1024);
  ExtentIndex::Options old_set, new_set;
  old_set.set_id = 1;
  new_set.set_id = 2;
  IndexRoot old_root;
  {
    auto idx = MustCreate(&store, old_set);
    REQUIRE(idx->Insert(Ext(0, 0, 4, 100)).ok());
    old_root = idx->Checkpoint().value();
    REQUIRE(idx->Insert(Ext(0, 8, 4, 100)).ok());
    REQUIRE(idx->Commit().ok());  // stays in the journal area
  }
  // A new format whose root (wrongly) points at an old node: refused.
  auto r = ExtentIndex::Open(&store, old_root, new_set);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::EndsWith("wrong set"));
  // A fresh index of the new set over the old journal bytes replays nothing.
  auto idx = MustCreate(&store, new_set);
  IndexRoot root = idx->Checkpoint().value();
  std::vector<uint8_t> stale;
  std::vector<uint8_t> payload;
  AppendInsertOp(&payload, Ext(0, 40, 1, 1));
  stale = EncodeJournalEntry(root.journal_seq + 1, 1, payload, /*set_id=*/1);
  store.AppendJournalGarbage(stale);
  idx.reset();
  idx = MustOpen(&store, root, new_set);
  CHECK(LookupAll(*idx, 0, 0, 100).empty());
}

TEST_CASE("an entry out of sequence ends replay") {
  Fixture f;
  REQUIRE(f.idx->Insert(Ext(0, 0, 4, 100)).ok());
  REQUIRE(f.idx->Commit().ok());
  std::vector<uint8_t> payload;
  AppendInsertOp(&payload, Ext(0, 50, 1, 1));
  auto stale = EncodeJournalEntry(7, 1, payload);  // expected seq 2
  f.store.AppendJournalGarbage(stale);
  f.CrashAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 0, 4, 100)});
}

TEST_CASE("entries a checkpoint already contains are skipped, not replayed over newer state") {
  // A crash after the superblock write but before the journal trim leaves
  // old entries in front of the new root: replaying them would resurrect A.
  Fixture f;
  REQUIRE(f.idx->Insert(Ext(0, 0, 4, 100)).ok());  // A
  REQUIRE(f.idx->Commit().ok());
  std::vector<uint8_t> old;
  REQUIRE(f.store.ReadJournal(&old).ok());
  REQUIRE(f.idx->Invalidate(0, 0, 4 * K).ok());  // uncommitted, but in the checkpoint
  f.root = f.idx->Checkpoint().value();
  f.store.AppendJournalGarbage(old);  // the trim "did not happen"
  REQUIRE(f.idx->Insert(Ext(0, 10, 1, 7)).ok());
  REQUIRE(f.idx->Commit().ok());  // seq 2, after the stale seq 1
  f.CrashAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 10, 1, 7)});
}

TEST_CASE("Open reads the roots and the journal, and no other node") {
  MemNodeStore store(1024);
  ExtentIndex::Options o;
  o.shards = 4;
  IndexRoot root;
  {
    auto idx = MustCreate(&store, o);
    for (uint64_t i = 0; i < 20000; i++) REQUIRE(idx->Insert(Ext(0, i * 2, 1, i)).ok());
    root = idx->Checkpoint().value();
    REQUIRE(idx->stats().nodes > 500);
  }
  auto idx = MustOpen(&store, root, o);
  CHECK(idx->stats().node_reads == 4);
  CHECK(idx->stats().extents == 20000);
  std::vector<Extent> out;
  REQUIRE(idx->Lookup(0, 2 * 777 * K, K, &out).ok());
  CHECK(out == V{Ext(0, 2 * 777, 1, 777)});
  // One root-to-leaf path below the root: the tree's height minus one.
  int height = 0;
  for (auto& s : root.shards) height = std::max(height, s.level + 1);
  CHECK(idx->stats().node_reads <= 4u + height - 1);
}

TEST_CASE("a failed journal append keeps the ops for the next commit") {
  Fixture f;
  REQUIRE(f.idx->Insert(Ext(0, 0, 4, 100)).ok());
  f.store.set_fail_writes(true);
  CHECK_FALSE(f.idx->Commit().ok());
  f.store.set_fail_writes(false);
  REQUIRE(f.idx->Insert(Ext(0, 8, 4, 200)).ok());
  REQUIRE(f.idx->Commit().ok());
  f.CrashAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 0, 4, 100), Ext(0, 8, 4, 200)});
}

TEST_CASE("soft entries: replayed only as far as their data checks hold, their clean inserts are forgotten") {
  // The cache device's contents as a power cut left them: 4 KiB blocks by
  // cache offset. check_data hashes what is there.
  std::map<uint64_t, std::vector<uint8_t>> media;
  auto block = [](uint8_t v) { return std::vector<uint8_t>(K, v); };
  ExtentIndex::Options o;
  o.check_data = [&media](const Extent& e, uint64_t hash) {
    auto it = media.find(e.cache_offset);
    return e.len == K && it != media.end() && Hash64(it->second.data(), K) == hash;
  };
  MemNodeStore store{1024};
  auto idx = MustCreate(&store, o);
  IndexRoot root = idx->Checkpoint().value();
  auto b1 = block(1), b2 = block(2), b3 = block(3);
  // Confirmed: a hard commit of an unchecked clean insert.
  REQUIRE(idx->Insert(Ext(0, 0, 1, 100)).ok());
  REQUIRE(idx->Commit().ok());
  // Soft: a checked dirty insert whose data is on the media, and a clean one.
  media[101 * K] = b1;
  REQUIRE(idx->Insert(Ext(0, 1, 1, 101, 0, true), b1.data()).ok());
  REQUIRE(idx->Insert(Ext(0, 2, 1, 102)).ok());
  REQUIRE(idx->Commit(true).ok());
  // Soft: a checked dirty insert whose data the cut lost (the media holds b3).
  media[103 * K] = b3;
  REQUIRE(idx->Insert(Ext(0, 3, 1, 103, 0, true), b2.data()).ok());
  REQUIRE(idx->Commit(true).ok());
  // Soft, after it: a checked insert whose data is there — past the failed
  // entry, so not replayed either.
  media[104 * K] = b1;
  REQUIRE(idx->Insert(Ext(0, 4, 1, 104, 0, true), b1.data()).ok());
  REQUIRE(idx->Commit(true).ok());
  size_t before = store.journal_size();

  SECTION("a power cut") {
    idx.reset();
    idx = MustOpen(&store, root, o);
    CHECK(LookupAll(*idx, 0, 0, 1) == V{Ext(0, 0, 1, 100)});           // confirmed: as it was
    CHECK(LookupAll(*idx, 0, 1, 1) == V{Ext(0, 1, 1, 101, 0, true)});  // its data checks
    CHECK(LookupAll(*idx, 0, 2, 1).empty());  // clean, unconfirmed: the backing device has it
    CHECK(LookupAll(*idx, 0, 3, 2).empty());  // the failed check, and everything after it
    CHECK(store.journal_size() < before);     // dropped, so later appends do not chain on it
  }
  SECTION("a hard commit with nothing new confirms the soft entries before it") {
    REQUIRE(idx->Commit().ok());
    media[103 * K] = b2;  // (the flush put the data there too)
    idx.reset();
    idx = MustOpen(&store, root, o);
    CHECK(LookupAll(*idx, 0, 2, 1) == V{Ext(0, 2, 1, 102)});  // no longer forgotten
    CHECK(LookupAll(*idx, 0, 3, 2) == V{Ext(0, 3, 1, 103, 0, true), Ext(0, 4, 1, 104, 0, true)});
  }
}

TEST_CASE("a soft entry's unchecked dirty insert ends replay: nothing could tell whether its data is there") {
  MemNodeStore store{1024};
  auto idx = MustCreate(&store);
  IndexRoot root = idx->Checkpoint().value();
  REQUIRE(idx->Insert(Ext(0, 0, 1, 100, 0, true)).ok());
  REQUIRE(idx->Commit(true).ok());
  idx.reset();
  idx = MustOpen(&store, root);
  CHECK(LookupAll(*idx, 0, 0, 1).empty());
}

TEST_CASE("a provisional insert and a backing-flushed op round-trip, and a provisional dirty insert is refused") {
  std::vector<uint8_t> payload;
  AppendInsertOp(&payload, Ext(3, 10, 2, 77, 9), nullptr, true);
  AppendBackingFlushedOp(&payload, 3, 5, 12);
  auto entry = EncodeJournalEntry(17, 2, payload);
  size_t len = 0;
  uint64_t seq = 0;
  std::vector<JournalOp> ops;
  REQUIRE(DecodeJournalEntry(entry.data(), entry.size(), &len, &seq, &ops).ok());
  REQUIRE(ops.size() == 2);
  CHECK(ops[0].type == JournalOp::Type::kInsert);
  CHECK(ops[0].provisional);
  CHECK(ops[0].extent == Ext(3, 10, 2, 77, 9));
  CHECK(ops[1].type == JournalOp::Type::kBackingFlushed);
  CHECK(ops[1].extent.dev == 3);
  CHECK(ops[1].first_seq == 5);
  CHECK(ops[1].last_seq == 12);
  // A dirty piece is the only copy of its data: never provisional.
  payload.clear();
  AppendInsertOp(&payload, Ext(3, 10, 2, 77, 9, true), nullptr, true);
  entry = EncodeJournalEntry(1, 1, payload);
  REQUIRE(DecodeJournalEntry(entry.data(), entry.size(), &len, &seq, &ops).ok());
  CHECK(!ops[0].provisional);
  payload.back() |= 0x80;  // forced on a dirty insert: corrupt
  entry = EncodeJournalEntry(1, 1, payload);
  CHECK(DecodeJournalEntry(entry.data(), entry.size(), &len, &seq, &ops).message() ==
        "journal: bad extent");
}

// Ordering rule 9 (doc/design.md), the journal's half: a provisional clean
// insert replays as a copy only when a recorded backing flush of its run
// covers its entry, else as the invalidation of its range.
TEST_CASE("rule 9: a provisional insert replays only when a recorded backing flush covers its entry") {
  Fixture f;
  REQUIRE(f.idx->Insert(Ext(0, 0, 4, 100), nullptr, true).ok());  // flushed below
  REQUIRE(f.idx->Insert(Ext(1, 0, 4, 200), nullptr, true).ok());  // another device's: not
  REQUIRE(f.idx->Insert(Ext(0, 20, 4, 300)).ok());                // durable: no mark
  REQUIRE(f.idx->Commit().ok());
  CHECK(f.idx->last_provisional_seq() == f.idx->written_seq());
  const uint64_t covered = f.idx->written_seq();
  REQUIRE(f.idx->Insert(Ext(0, 10, 4, 400), nullptr, true).ok());  // after the flush was issued
  REQUIRE(f.idx->Commit().ok());
  f.idx->JournalBackingFlushed(0, f.idx->run_first_seq(), covered);
  REQUIRE(f.idx->Commit().ok());
  f.PowerCutAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 0, 4, 100), Ext(0, 20, 4, 300)});
  CHECK(LookupAll(*f.idx, 1, 0, 100).empty());
}

TEST_CASE("rule 9: a later run's backing flush covers none of an earlier run's provisional inserts") {
  Fixture f;
  REQUIRE(f.idx->Insert(Ext(0, 0, 4, 100)).ok());
  REQUIRE(f.idx->Commit().ok());
  REQUIRE(f.idx->Insert(Ext(0, 0, 4, 200), nullptr, true).ok());  // the backing data it copies is lost
  REQUIRE(f.idx->Commit().ok());
  f.PowerCutAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100).empty());  // the old copy was replaced, the new one not durable
  // The next run flushes the backing device: that covers only its own
  // entries — the first run's provisional data was lost by the cut.
  const uint64_t first = f.idx->run_first_seq();
  CHECK(first == f.idx->written_seq() + 1);
  REQUIRE(f.idx->Insert(Ext(0, 40, 4, 500), nullptr, true).ok());
  REQUIRE(f.idx->Commit().ok());
  f.idx->JournalBackingFlushed(0, first, f.idx->written_seq());
  REQUIRE(f.idx->Commit().ok());
  f.PowerCutAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 40, 4, 500)});
}

// Broken by: no power-domain op after a checkpoint's trim (the entries after
// it then belong to no known domain); or ApplyFlushCoverage ignoring it.
TEST_CASE("rule 9: a restart without a power cut keeps the provisional inserts of earlier runs") {
  Fixture f;
  REQUIRE(f.idx->Insert(Ext(0, 0, 4, 100), nullptr, true).ok());
  REQUIRE(f.idx->Commit().ok());
  f.CrashAndReopen();  // kill -9: the backing device still has what it took
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 0, 4, 100)});
  CHECK(f.idx->kept_on_power() == 1);
  // A checkpoint trims the entry holding the run's domain; entries after it
  // are still known to be of this domain.
  f.root = f.idx->Checkpoint().value();
  REQUIRE(f.idx->Insert(Ext(0, 20, 4, 200), nullptr, true).ok());
  REQUIRE(f.idx->Commit().ok());
  f.CrashAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 0, 4, 100), Ext(0, 20, 4, 200)});
  CHECK(f.idx->kept_on_power() == 1);
  // A power cut: the second copy's backing data may be gone.
  f.PowerCutAndReopen();
  CHECK(LookupAll(*f.idx, 0, 0, 100) == V{Ext(0, 0, 4, 100)});
  CHECK(f.idx->kept_on_power() == 0);
}
