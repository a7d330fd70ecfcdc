// SPDX-License-Identifier: Apache-2.0
// make_format_corpus DIR: writes the seed corpora of the format fuzz
// targets into DIR/<target>/ — valid encodings made by the real encoders,
// each under the flags (format_fuzz.h) that let the fuzzer mutate past its
// checksum. Built with the fuzz preset; its output is committed in
// tests/fuzz/corpus/ (regression inputs, regress-*, are added beside the
// seeds by hand):
//   build-fuzz/tests/fuzz/make_format_corpus tests/fuzz/corpus
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "btree/extent_index.h"
#include "btree/journal_format.h"
#include "btree/mem_node_store.h"
#include "btree/node_format.h"
#include "cache/bucket_table.h"
#include "cache/superblock.h"
#include "tests/fuzz/format_fuzz.h"

using namespace ubcache;
using namespace ubcache::fuzz;

namespace {

constexpr uint64_t kSetId = 0x5e7;
std::string out_dir;

void Put(const std::string& target, const std::string& name, uint8_t flags,
         const std::vector<uint8_t>& bytes) {
  std::string dir = out_dir + "/" + target;
  mkdir(dir.c_str(), 0755);
  std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fputc(flags, f);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

template <typename T>
T Must(Result<T> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "make_format_corpus: %s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

void Superblocks() {
  CacheFormatOptions co;
  co.label = "seed";
  CacheSuperblock cold = Must(NewCacheSuperblock(co, 1ull << 30, 4096));
  std::vector<uint8_t> b(kSuperblockSize);
  EncodeCacheSuperblock(cold, SuperblockBlock(b.data(), kSuperblockSize));
  Put("cache_superblock_fuzz", "cold", 0, b);
  Put("cache_superblock_fuzz", "cold-resealed", kReseal, b);

  CacheSuperblock warm = cold;
  warm.feature_incompat |= CacheSuperblock::kIncompatWarmState;
  warm.flags |= CacheSuperblock::kFlagClean;
  IndexRoot root;
  root.node_size = 65536;
  root.stripe_bytes = 1 << 20;
  root.journal_seq = 42;
  root.generation = 3;
  root.shards.resize(4);
  for (size_t i = 0; i < root.shards.size(); i++) root.shards[i] = {(i + 9) * 65536, uint8_t(i % 2), 7, 2};
  warm.index_root = root.Encode();
  warm.bucket_table_offset = warm.first_bucket * warm.bucket_size;
  warm.bucket_table_len = 4096;
  EncodeCacheSuperblock(warm, SuperblockBlock(b.data(), kSuperblockSize));
  Put("cache_superblock_fuzz", "warm", 0, b);
  Put("cache_superblock_fuzz", "warm-resealed", kReseal, b);
  Put("cache_superblock_fuzz", "warm-any-size", kReseal | kTrustIds, b);

  CacheSuperblock fenced = warm;
  fenced.feature_incompat |= CacheSuperblock::kIncompatFences;
  for (uint8_t i = 1; i <= 3; i++) {
    Uuid u{};
    u[0] = i;
    u[15] = 0x5a;
    fenced.fences.push_back({u, 1800000000ull + i});
  }
  EncodeCacheSuperblock(fenced, SuperblockBlock(b.data(), kSuperblockSize));
  Put("cache_superblock_fuzz", "fenced", 0, b);
  Put("cache_superblock_fuzz", "fenced-resealed", kReseal, b);

  for (uint64_t off : {8192ull, 1ull << 20}) {
    BackingFormatOptions bo;
    bo.data_offset = off;
    bo.label = "seed";
    BackingSuperblock bsb = Must(NewBackingSuperblock(bo, 1ull << 30, 512));
    EncodeBackingSuperblock(bsb, SuperblockBlock(b.data(), kSuperblockSize));
    std::string n = "detached-" + std::to_string(off);
    Put("backing_superblock_fuzz", n, 0, b);
    Put("backing_superblock_fuzz", n + "-resealed", kReseal, b);
    bsb.set_uuid = cold.uuid;
    bsb.state = BackingState::kDirty;
    bsb.cache_mode = CacheMode::kWriteback;
    EncodeBackingSuperblock(bsb, SuperblockBlock(b.data(), kSuperblockSize));
    Put("backing_superblock_fuzz", "dirty-" + std::to_string(off) + "-resealed", kReseal, b);
  }
}

void Table() {
  BucketTable t;
  t.set_id = kSetId;
  t.index_generation = 5;
  t.node_size = 65536;
  t.next_dev = 2;
  for (int i = 0; i < 32; i++)
    t.buckets.push_back({uint8_t(i), uint8_t(i / 2), BucketAllocator::Kind(i % 3), uint16_t(i * 7)});
  t.nodes = {65536 * 9, 65536 * 10, 65536 * 12};
  t.devices = {{Uuid{1, 2, 3}, 0}, {Uuid{4, 5, 6}, 1}};
  t.dirty = {1, 0, 0, 0, 0, 0, 0, 0};
  Put("bucket_table_fuzz", "table", kTrustIds, t.Encode());
  Put("bucket_table_fuzz", "table-resealed", kReseal | kTrustIds, t.Encode());
  t.dirty.clear();
  t.devices.clear();
  Put("bucket_table_fuzz", "table-small-resealed", kReseal, t.Encode());
}

void Nodes() {
  for (uint32_t size : {4096u, kMinNodeSize}) {
    std::vector<uint8_t> b(size);
    std::vector<Extent> ex;
    for (uint64_t i = 0; i < 6; i++) ex.push_back({uint32_t(i / 3), i * 65536, 8192, i << 20, 1, i % 2 == 0});
    EncodeLeafNode(b.data(), size, 0, 9, 4096, ex, kSetId);
    std::string s = std::to_string(size);
    Put("btree_node_fuzz", "leaf-" + s, 0, b);
    Put("btree_node_fuzz", "leaf-" + s + "-resealed", kReseal | kTrustIds, b);
    std::vector<NodeChildRef> kids;
    for (uint64_t i = 0; i < 4; i++) kids.push_back({{0, i * 65536}, (i + 2) * 4096});
    EncodeInternalNode(b.data(), size, 1, 0, 9, 4096, kids, kSetId);
    Put("btree_node_fuzz", "internal-" + s, 0, b);
    Put("btree_node_fuzz", "internal-" + s + "-resealed", kReseal | kTrustIds | 4, b);
  }
}

void Journal() {
  std::vector<uint8_t> j;
  for (uint64_t e = 0; e < 3; e++) {
    std::vector<uint8_t> payload;
    Extent x{uint32_t(e % 2), e << 16, 8192, (e + 8) << 20, 1, e == 1};
    AppendInsertOp(&payload, x);
    uint64_t hash = 0x1234 + e;
    x.start += 65536;
    AppendInsertOp(&payload, x, &hash);
    AppendInvalidateOp(&payload, 0, 0, 0, 4096);
    std::vector<uint8_t> ent = EncodeJournalEntry(2 + e, 3, payload, kSetId);
    j.insert(j.end(), ent.begin(), ent.end());
  }
  Put("journal_fuzz", "three-entries", kReseal | kTrustIds, j);
  Put("journal_fuzz", "three-entries-raw", 0, j);
  j.resize(j.size() - 5);
  Put("journal_fuzz", "torn-tail", kReseal | kTrustIds, j);
}

void Index() {
  MemNodeStore store(kMinNodeSize);
  ExtentIndex::Options o;
  o.shards = 2;
  o.set_id = kSetId;
  o.cache_bytes = 1 << 20;
  auto idx = Must(ExtentIndex::Create(&store, o));
  for (uint64_t i = 0; i < 40; i++)
    if (!idx->Insert({uint32_t(i % 2), i * 3 * 4096, 4096, i << 16, 1, i % 5 == 0}).ok()) std::exit(1);
  if (!idx->Commit().ok()) std::exit(1);
  IndexRoot root = Must(idx->Checkpoint());
  std::vector<uint8_t> in = {uint8_t(root.shards.size() - 1)};
  for (const ShardRoot& s : root.shards) {
    in.push_back(s.addr == kNoNode ? 0xff : uint8_t(s.addr / kMinNodeSize));
    in.push_back(s.level);
  }
  std::vector<uint8_t> node(kMinNodeSize);
  for (uint64_t a = 0; a < 64 * kMinNodeSize; a += kMinNodeSize) {
    if (!store.ReadNode(a, node.data()).ok()) break;
    in.insert(in.end(), node.begin(), node.end());
  }
  Put("index_open_fuzz", "two-shards", 0, in);
  Put("index_open_fuzz", "two-shards-resealed", kReseal | kTrustIds, in);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_format_corpus DIR\n");
    return 2;
  }
  out_dir = argv[1];
  Superblocks();
  Table();
  Nodes();
  Journal();
  Index();
  return 0;
}
