// SPDX-License-Identifier: Apache-2.0
// Fuzzes the btree node decoder (doc/format.md "btree node") at a 4 KiB and
// at the smallest (512 B) node size. Input: a flags byte (format_fuzz.h),
// then the node; with kReseal its checksum is recomputed over the entries
// its header counts, with kTrustIds the reader expects the address, shard
// and set the node names (so those checks pass and the entries are
// reached). Invariants: an error names its check; a decoded node has no
// more entries than its capacity, its keys in order, and encodes to a node
// that decodes to the same entries.
#include <cstddef>
#include <cstdint>

#include "btree/node_format.h"
#include "tests/fuzz/format_fuzz.h"

using namespace ubcache;
using namespace ubcache::fuzz;

namespace {

void Node(const uint8_t* data, size_t size, uint8_t flags, uint32_t node_size) {
  std::vector<uint8_t> b = Block(data, size, node_size);
  uint8_t* p = b.data();
  if (flags & kReseal) {
    size_t entry = p[14] == 0 ? kLeafEntrySize : kInternalEntrySize;
    uint64_t count = LoadLE32(p + 16);
    if (count <= node_size / entry) ResealRange(p, node_size, 0, 8, kNodeHeaderSize + count * entry);
  }
  NodeExpectation want;
  if (flags & kTrustIds) {
    want.addr = LoadLE64(p + 32);
    want.shard = LoadLE32(p + 20);
    want.set_id = LoadLE64(p + 40);
  } else {
    want.addr = 4096;
    want.set_id = 0x5e7;
  }
  want.level = (flags & 4) ? p[14] : -1;
  DecodedNode n;
  Status st = DecodeNode(p, node_size, want, &n);
  if (!st.ok()) return CheckError(st);
  FUZZ_CHECK(n.shard == want.shard);
  std::vector<uint8_t> enc(node_size);
  if (n.level == 0) {
    FUZZ_CHECK(n.children.empty() && n.extents.size() <= LeafCapacity(node_size));
    for (size_t i = 1; i < n.extents.size(); i++)
      FUZZ_CHECK(n.extents[i - 1].dev < n.extents[i].dev ||
                 (n.extents[i - 1].dev == n.extents[i].dev &&
                  n.extents[i - 1].start + n.extents[i - 1].len <= n.extents[i].start));
    EncodeLeafNode(enc.data(), node_size, n.shard, n.seq, want.addr, n.extents, want.set_id);
  } else {
    FUZZ_CHECK(n.extents.empty() && n.children.size() <= InternalCapacity(node_size));
    EncodeInternalNode(enc.data(), node_size, n.level, n.shard, n.seq, want.addr, n.children,
                       want.set_id);
  }
  DecodedNode n2;
  FUZZ_CHECK(DecodeNode(enc.data(), node_size, want, &n2).ok());
  FUZZ_CHECK(n2.level == n.level && n2.extents.size() == n.extents.size() &&
             n2.children.size() == n.children.size());
  for (size_t i = 0; i < n.extents.size(); i++) {
    const Extent &a = n.extents[i], &c = n2.extents[i];
    FUZZ_CHECK(a.dev == c.dev && a.start == c.start && a.len == c.len &&
               a.cache_offset == c.cache_offset && a.gen == c.gen && a.dirty == c.dirty);
  }
  for (size_t i = 0; i < n.children.size(); i++) FUZZ_CHECK(n.children[i].addr == n2.children[i].addr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Node(data + 1, size - 1, data[0], 4096);
  Node(data + 1, size - 1, data[0], kMinNodeSize);
  return 0;
}
