// SPDX-License-Identifier: Apache-2.0
// Fuzzes the index's open-from-root path over a node store the input
// fills: what `serve` does with a cache device whose metadata buckets hold
// anything at all. Input: a flags byte (format_fuzz.h), a shard count and
// per shard a root (node number, level), then 512-byte node images at
// addresses 0, 512, 1024, …; with kReseal each node's checksum is
// recomputed, with kTrustIds each node is also given its real address and
// the set's id, so the tree's structure (levels, children, keys) is what
// is fuzzed. Invariants: Open returns a clear error or an index whose
// lookups are ordered and free of overlaps; a checkpoint of it then works;
// nothing reads out of bounds, loops forever or allocates without bound.
#include <cstddef>
#include <cstdint>

#include "btree/node_format.h"
#include "tests/fuzz/index_fuzz.h"
#include "util/log.h"

using namespace ubcache;
using namespace ubcache::fuzz;

namespace {
constexpr uint64_t kSetId = 0x5e7;
constexpr uint32_t kNodeSize = kMinNodeSize;
constexpr size_t kMaxNodes = 64;
}  // namespace

// The index warns about what it finds wrong (a replay that ends early, a
// bad node): a line per input, millions in a long run, slowing it down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)ubcache::SetLogLevel("off");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  uint8_t flags = data[0];
  size_t nshards = 1 + data[1] % 4;
  size_t pos = 2;
  if (size < pos + 2 * nshards) return 0;
  IndexRoot root;
  root.node_size = kNodeSize;
  root.stripe_bytes = 1 << 20;
  root.journal_seq = 0;
  root.generation = 1;
  for (size_t i = 0; i < nshards; i++) {
    ShardRoot s;
    uint8_t n = data[pos++];
    s.addr = n == 0xff ? kNoNode : uint64_t{n % kMaxNodes} * kNodeSize;
    s.level = data[pos++] % (kMaxLevel + 2);  // kMaxLevel + 1: a bad level
    root.shards.push_back(s);
  }
  // The root goes through its encoding, as it would from a superblock.
  std::vector<uint8_t> enc = root.Encode();
  auto decoded = IndexRoot::Decode(enc.data(), enc.size());
  if (!decoded.ok()) {
    CheckError(decoded.status());
    return 0;
  }

  FuzzNodeStore store(kNodeSize);
  for (size_t n = 0; n < kMaxNodes && pos < size; n++, pos += kNodeSize) {
    std::vector<uint8_t> b = Block(data + pos, size - pos, kNodeSize);
    uint8_t* p = b.data();
    uint64_t addr = n * kNodeSize;
    if (flags & kTrustIds) {
      StoreLE32(p + 8, kNodeMagic);
      StoreLE16(p + 12, kNodeVersion);
      StoreLE64(p + 32, addr);
      StoreLE64(p + 40, kSetId);
    }
    if (flags & kReseal) {
      size_t entry = p[14] == 0 ? kLeafEntrySize : kInternalEntrySize;
      uint64_t count = LoadLE32(p + 16);
      if (count <= kNodeSize / entry) ResealRange(p, kNodeSize, 0, 8, kNodeHeaderSize + count * entry);
    }
    FUZZ_CHECK(store.WriteNode(addr, p).ok());
  }

  ExtentIndex::Options o;
  o.set_id = kSetId;
  o.cache_bytes = 64 * kNodeSize;
  auto idx = ExtentIndex::Open(&store, *decoded, o);
  if (!idx.ok()) {
    CheckError(idx.status());
    return 0;
  }
  CheckIndex(idx->get());
  auto again = (*idx)->Checkpoint();
  if (!again.ok()) CheckError(again.status());
  return 0;
}
