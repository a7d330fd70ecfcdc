// SPDX-License-Identifier: Apache-2.0
// Fuzzes the backing superblock decoder (Linux bcache's layout, as the
// kernel's read_super() checks it; doc/format.md) over one 4 KiB block.
// Input: a flags byte (format_fuzz.h), then the block; with kReseal the
// bch_crc64 is recomputed. Invariants: an error names its check; a decoded
// superblock validates, encodes, and decodes again to the same fields.
#include <cstddef>
#include <cstdint>

#include "cache/superblock.h"
#include "tests/fuzz/format_fuzz.h"

using namespace ubcache;
using namespace ubcache::fuzz;

namespace {

constexpr uint64_t kDeviceSize = 1ull << 30;

void ResealBacking(uint8_t* p) {
  // bch_crc64 of bytes 8 .. 208 + 8 * keys.
  size_t keys = LoadLE16(p + 206);
  if (208 + 8 * keys <= kSuperblockSize) StoreLE64(p, BcacheCrc64(p + 8, 200 + 8 * keys));
}

void Backing(std::vector<uint8_t> b, uint8_t flags) {
  if (flags & kReseal) ResealBacking(b.data());
  ConstSuperblockBlock block(b.data(), kSuperblockSize);
  uint64_t size = (flags & kTrustIds) ? 0 : kDeviceSize;
  auto sb = DecodeBackingSuperblock(block, size, 512);
  if (!sb.ok()) return CheckError(sb.status());
  FUZZ_CHECK(ValidateBackingSuperblock(*sb, size, 512).ok());
  std::vector<uint8_t> again(kSuperblockSize);
  EncodeBackingSuperblock(*sb, SuperblockBlock(again.data(), kSuperblockSize));
  auto sb2 = DecodeBackingSuperblock(ConstSuperblockBlock(again.data(), kSuperblockSize), size, 512);
  FUZZ_CHECK(sb2.ok());
  FUZZ_CHECK(sb2->uuid == sb->uuid && sb2->set_uuid == sb->set_uuid && sb2->seq == sb->seq &&
             sb2->data_offset == sb->data_offset && sb2->state == sb->state &&
             sb2->cache_mode == sb->cache_mode && sb2->label == sb->label &&
             sb2->other_flags == sb->other_flags && sb2->version == sb->version);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Backing(Block(data + 1, size - 1, kSuperblockSize), data[0]);
  return 0;
}
