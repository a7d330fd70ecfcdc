// SPDX-License-Identifier: Apache-2.0
// On-disk node encoding: round trip, and one test per check of the
// validation cascade, each naming the check that failed first.
#include "btree/node_format.h"

#include <catch2/catch.hpp>

#include "btree/extent_index.h"
#include "btree/mem_node_store.h"
#include "tests/unit/btree/index_test_support.h"
#include "util/endian.h"
#include "util/hash.h"

using namespace ubcache;
using namespace ubcache::testing;

namespace {

constexpr uint32_t kSize = 4096;

std::vector<uint8_t> LeafBuf(const std::vector<Extent>& ext, uint64_t addr = 8192) {
  std::vector<uint8_t> buf(kSize);
  EncodeLeafNode(buf.data(), kSize, 3, 99, addr, ext);
  return buf;
}

std::string DecodeError(const std::vector<uint8_t>& buf, NodeExpectation want = {8192, 3, 0}) {
  DecodedNode d;
  Status st = DecodeNode(buf.data(), kSize, want, &d);
  return st.ok() ? "ok" : st.message();
}

void Reseal(std::vector<uint8_t>* buf, size_t entry_size) {
  uint32_t count = LoadLE32(buf->data() + 16);
  StoreLE64(buf->data(), Hash64(buf->data() + 8, kNodeHeaderSize - 8 + count * entry_size));
}

}  // namespace

TEST_CASE("a leaf node round-trips through its on-disk encoding") {
  std::vector<Extent> ext = {Ext(0, 0, 4, 100, 1, true), Ext(0, 8, 2, 7, 255),
                             Ext(5, 0, 1, 1u << 30)};
  auto buf = LeafBuf(ext);
  DecodedNode d;
  REQUIRE(DecodeNode(buf.data(), kSize, {8192, 3, 0}, &d).ok());
  CHECK(d.level == 0);
  CHECK(d.seq == 99);
  CHECK(d.extents == ext);
  // Explicit little-endian layout: magic at 8, count at 16, first key at 48+4.
  CHECK(LoadLE32(buf.data() + 8) == kNodeMagic);
  CHECK(LoadLE32(buf.data() + 16) == 3);
  CHECK(LoadLE64(buf.data() + 48 + 4) == 4 * K);
}

TEST_CASE("an internal node round-trips through its on-disk encoding") {
  std::vector<NodeChildRef> kids = {{{0, 0}, 4096}, {{0, 40960}, 12288}, {{2, 4096}, 0}};
  std::vector<uint8_t> buf(kSize);
  EncodeInternalNode(buf.data(), kSize, 2, 3, 5, 8192, kids);
  DecodedNode d;
  REQUIRE(DecodeNode(buf.data(), kSize, {8192, 3, 2}, &d).ok());
  REQUIRE(d.children.size() == 3);
  CHECK(d.children[1].key == ExtentKey{0, 40960});
  CHECK(d.children[2].addr == 0);
}

TEST_CASE("node validation names the first failed check") {
  auto good = LeafBuf({Ext(0, 0, 4, 100), Ext(0, 8, 2, 7)});
  CHECK(DecodeError(good) == "ok");

  auto b = good;
  b[8] ^= 1;
  CHECK(DecodeError(b) == "btree node 0x2000: bad magic");
  b = good;
  b[12] = 9;
  CHECK(DecodeError(b) == "btree node 0x2000: bad version");
  b = good;
  b[14] = 16;
  CHECK(DecodeError(b) == "btree node 0x2000: bad level");
  b = good;
  b[15] = 1;
  CHECK(DecodeError(b) == "btree node 0x2000: bad flags");
  b = good;
  StoreLE32(b.data() + 16, 100000);
  CHECK(DecodeError(b) == "btree node 0x2000: bad count");
  b = good;
  b[60] ^= 4;  // an entry byte
  CHECK(DecodeError(b) == "btree node 0x2000: bad csum");
  CHECK(DecodeError(good, {4096, 3, 0}) == "btree node 0x1000: wrong address");
  CHECK(DecodeError(good, {8192, 3, 0, 77}) == "btree node 0x2000: wrong set");
  CHECK(DecodeError(good, {8192, 4, 0}) == "btree node 0x2000: wrong shard");
  CHECK(DecodeError(good, {8192, 3, 1}) == "btree node 0x2000: wrong level");
  // Checksummed but nonsensical content: caught after the checksum.
  CHECK(DecodeError(LeafBuf({Extent{0, 0, 0, 0, 0, false}})) == "btree node 0x2000: bad extent");
  CHECK(DecodeError(LeafBuf({Ext(0, 8, 2, 7), Ext(0, 0, 4, 100)})) ==
        "btree node 0x2000: keys out of order");
  CHECK(DecodeError(LeafBuf({Ext(0, 0, 4, 7), Ext(0, 2, 4, 100)})) ==
        "btree node 0x2000: keys out of order");  // overlap
  b = good;
  b[48 + 25] = 2;  // undefined extent flag
  Reseal(&b, kLeafEntrySize);
  CHECK(DecodeError(b) == "btree node 0x2000: bad extent");
}

TEST_CASE("a corrupt node below the root fails the lookup that reaches it with Corruption") {
  MemNodeStore store(1024);
  ExtentIndex::Options o;
  o.shards = 1;
  IndexRoot root;
  {
    auto idx = MustCreate(&store, o);
    for (uint64_t i = 0; i < 400; i++) REQUIRE(idx->Insert(Ext(0, i * 2, 1, i)).ok());
    root = idx->Checkpoint().value();
  }
  REQUIRE(root.shards[0].level >= 1);
  // Open reads the root only, so the damage shows up where a lookup goes.
  uint64_t victim = ~uint64_t{0};
  {
    std::vector<uint8_t> buf(1024);
    REQUIRE(store.ReadNode(root.shards[0].addr, buf.data()).ok());
    DecodedNode d;
    REQUIRE(DecodeNode(buf.data(), 1024, {root.shards[0].addr, 0, -1}, &d).ok());
    victim = d.children.back().addr;
  }
  store.FlipNodeByte(victim, 100);
  auto idx = MustOpen(&store, root, o);
  std::vector<Extent> out;
  Status st = idx->Lookup(0, 0, 4 * K, &out);  // first leaf: intact
  CHECK(st.ok());
  st = idx->Lookup(0, 798 * K, K, &out);  // last leaf: corrupt
  CHECK(st.IsCorruption());
  CHECK_THAT(st.message(), Catch::Contains("bad csum"));
  // The index stays usable elsewhere.
  CHECK(idx->Lookup(0, 0, 4 * K, &out).ok());
}

TEST_CASE("a corrupt root fails Open with the check that failed") {
  MemNodeStore store(1024);
  IndexRoot root;
  {
    auto idx = MustCreate(&store);
    REQUIRE(idx->Insert(Ext(0, 0, 1, 1)).ok());
    root = idx->Checkpoint().value();
  }
  uint64_t addr = kNoNode;
  for (auto& s : root.shards) if (s.extents) addr = s.addr;
  store.FlipNodeByte(addr, 8);
  auto r = ExtentIndex::Open(&store, root, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsCorruption());
  CHECK_THAT(r.status().message(), Catch::EndsWith("bad magic"));
}

TEST_CASE("a node read error fails the operation and leaves the tree intact") {
  MemNodeStore store(1024);
  ExtentIndex::Options o;
  o.shards = 1;
  o.cache_bytes = 0;  // nothing but the root stays resident
  auto idx = MustCreate(&store, o);
  for (uint64_t i = 0; i < 400; i++) REQUIRE(idx->Insert(Ext(0, i * 2, 1, i)).ok());
  auto before = AllExtents(*idx);
  store.set_fail_reads(true);
  CHECK(idx->Insert(Ext(0, 1, 10, 5000)).IsIoError());
  std::vector<Extent> out;
  CHECK(idx->Lookup(0, 0, K, &out).IsIoError());
  store.set_fail_reads(false);
  CHECK(AllExtents(*idx) == before);
}
