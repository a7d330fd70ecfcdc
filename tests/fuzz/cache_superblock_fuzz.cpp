// SPDX-License-Identifier: Apache-2.0
// Fuzzes the cache superblock decoder (ubcache's own layout, doc/format.md)
// over one 4 KiB block, and the index root record it carries. Input: a
// flags byte (format_fuzz.h), then the block; with kReseal the block's and
// the root record's checksums are recomputed as doc/format.md says, so the
// field checks see the mutations. Invariants: an error names its check; a
// decoded superblock validates, encodes, and decodes again to the same
// fields; so does its root record.
#include <cstddef>
#include <cstdint>

#include "btree/extent_index.h"
#include "cache/superblock.h"
#include "tests/fuzz/format_fuzz.h"

using namespace ubcache;
using namespace ubcache::fuzz;

namespace {

constexpr uint64_t kDeviceSize = 1ull << 30;

void ResealCache(uint8_t* p) {
  // The root record at 512 has its own checksum over [8, 48 + 32 * nshards).
  uint8_t* r = p + CacheSuperblock::kIndexRootOffset;
  size_t n = LoadLE16(r + 14);
  ResealRange(r, CacheSuperblock::kMaxIndexRoot, 0, 8, 48 + 32 * n);
  // The block: XXH3-64 of all 4096 bytes with the csum field (at 16) as zero.
  std::memset(p + 16, 0, 8);
  StoreLE64(p + 16, Hash64(p, kSuperblockSize));
}

void Cache(std::vector<uint8_t> b, uint8_t flags) {
  if (flags & kReseal) ResealCache(b.data());
  ConstSuperblockBlock block(b.data(), kSuperblockSize);
  uint64_t size = (flags & kTrustIds) ? 0 : kDeviceSize;
  auto sb = DecodeCacheSuperblock(block, size, 4096);
  if (!sb.ok()) return CheckError(sb.status());
  FUZZ_CHECK(ValidateCacheSuperblock(*sb, size, 4096).ok());
  std::vector<uint8_t> again(kSuperblockSize);
  EncodeCacheSuperblock(*sb, SuperblockBlock(again.data(), kSuperblockSize));
  auto sb2 = DecodeCacheSuperblock(ConstSuperblockBlock(again.data(), kSuperblockSize), size, 4096);
  FUZZ_CHECK(sb2.ok());
  FUZZ_CHECK(sb2->uuid == sb->uuid && sb2->seq == sb->seq && sb2->nbuckets == sb->nbuckets &&
             sb2->bucket_size == sb->bucket_size && sb2->first_bucket == sb->first_bucket &&
             sb2->journal_buckets == sb->journal_buckets && sb2->label == sb->label &&
             sb2->index_root == sb->index_root && sb2->flags == sb->flags &&
             sb2->bucket_table_offset == sb->bucket_table_offset);
  // What serve does next with a warm superblock: decode the root record.
  if (!sb->index_root.empty()) {
    auto root = IndexRoot::Decode(sb->index_root.data(), sb->index_root.size());
    if (!root.ok()) return CheckError(root.status());
    FUZZ_CHECK(!root->shards.empty());
    std::vector<uint8_t> enc = root->Encode();
    auto root2 = IndexRoot::Decode(enc.data(), enc.size());
    FUZZ_CHECK(root2.ok() && root2->shards.size() == root->shards.size() &&
               root2->journal_seq == root->journal_seq);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Cache(Block(data + 1, size - 1, kSuperblockSize), data[0]);
  return 0;
}
