// SPDX-License-Identifier: Apache-2.0
// On-disk B-tree node: explicit little-endian encode/decode, validated in one
// cascade that names the first failed check. The grammar is in doc/format.md
// ("btree node"); the layout, in short:
//
//   header (48 bytes)
//     0  u64 csum      XXH3-64 of bytes [8, 48 + count * entry_size)
//     8  u32 magic     "UBND" (0x444e4255)
//    12  u16 version   1
//    14  u8  level     0 = leaf
//    15  u8  flags     0
//    16  u32 count     entries
//    20  u32 shard     which shard tree the node belongs to
//    24  u64 seq       write sequence of the shard (diagnostics)
//    32  u64 addr      the node's own address: catches misdirected writes
//    40  u64 set_id    the cache set (from its uuid): stale nodes of an
//                      earlier format of the device are rejected
//   leaf entry (26 bytes)     u32 dev, u64 end, u32 len, u64 cache_offset,
//                             u8 gen, u8 flags (bit 0 dirty)
//     version 2 packs the extent's 48-bit write epoch into bits the values
//     leave free (each is a multiple of 4 KiB; a cache device < 2^52 bytes):
//     end bits 0-11 = epoch bits 0-11, len bits 0-11 = epoch 12-23,
//     cache_offset bits 0-11 = epoch 24-35, cache_offset bits 52-63 = epoch
//     36-47. Version 1 nodes (written before epochs) read with epoch 0.
//   internal entry (20 bytes) u32 dev, u64 end (lowest key of the child;
//                             ignored for entry 0), u64 child addr
//   the rest of the node is zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "btree/extent.h"
#include "util/status.h"

namespace ubcache {

inline constexpr uint32_t kNodeMagic = 0x444e4255;  // "UBND"
inline constexpr uint16_t kNodeVersion = 2;
inline constexpr uint64_t kMaxEpoch = (uint64_t{1} << 48) - 1;  // what a leaf entry holds
inline constexpr uint64_t kMaxCacheOffset = uint64_t{1} << 52;
inline constexpr size_t kNodeHeaderSize = 48;
inline constexpr size_t kLeafEntrySize = 26;
inline constexpr size_t kInternalEntrySize = 20;
inline constexpr uint8_t kMaxLevel = 15;
inline constexpr uint32_t kMinNodeSize = 512;
inline constexpr uint64_t kNoNode = ~uint64_t{0};

// One entry of an internal node: children hold keys >= key (entry 0: all keys
// below entry 1's).
struct NodeChildRef {
  ExtentKey key;
  uint64_t addr = kNoNode;
};

// A node as decoded: the in-memory B-tree copies out of this.
struct DecodedNode {
  uint8_t level = 0;
  uint32_t shard = 0;
  uint64_t seq = 0;
  std::vector<Extent> extents;        // level 0
  std::vector<NodeChildRef> children;  // level > 0
};

inline size_t LeafCapacity(uint32_t node_size) {
  return (node_size - kNodeHeaderSize) / kLeafEntrySize;
}
inline size_t InternalCapacity(uint32_t node_size) {
  return (node_size - kNodeHeaderSize) / kInternalEntrySize;
}

// Encodes into buf (node_size bytes). Exactly one of extents/children is used,
// chosen by level; the count must fit the capacity.
void EncodeLeafNode(uint8_t* buf, uint32_t node_size, uint32_t shard, uint64_t seq,
                    uint64_t addr, const std::vector<Extent>& extents, uint64_t set_id = 0);
void EncodeInternalNode(uint8_t* buf, uint32_t node_size, uint8_t level, uint32_t shard,
                        uint64_t seq, uint64_t addr, const std::vector<NodeChildRef>& children,
                        uint64_t set_id = 0);

// What the reader expects of the node it is about to trust.
struct NodeExpectation {
  uint64_t addr = 0;
  uint32_t shard = 0;
  int level = -1;  // -1: any (a root read from IndexRoot says its level)
  uint64_t set_id = 0;
};

// Validates and decodes. Errors are Corruption("btree node <addr>: <check>"),
// naming the first failed check: bad magic, bad version, bad level, bad flags,
// bad count, bad csum, wrong address, wrong set, wrong shard, wrong level,
// bad extent, bad child,
// keys out of order.
Status DecodeNode(const uint8_t* buf, uint32_t node_size, const NodeExpectation& want,
                  DecodedNode* out);

}  // namespace ubcache
