// SPDX-License-Identifier: Apache-2.0
#include "btree/node_format.h"

#include <cassert>
#include <cstring>
#include <string>

#include "util/endian.h"
#include "util/hash.h"

namespace ubcache {
namespace {

void EncodeHeader(uint8_t* buf, uint32_t node_size, uint8_t level, uint32_t count,
                  uint32_t shard, uint64_t seq, uint64_t addr, uint64_t set_id,
                  size_t entry_size) {
  StoreLE32(buf + 8, kNodeMagic);
  StoreLE16(buf + 12, kNodeVersion);
  buf[14] = level;
  buf[15] = 0;
  StoreLE32(buf + 16, count);
  StoreLE32(buf + 20, shard);
  StoreLE64(buf + 24, seq);
  StoreLE64(buf + 32, addr);
  StoreLE64(buf + 40, set_id);
  size_t used = kNodeHeaderSize + size_t{count} * entry_size;
  std::memset(buf + used, 0, node_size - used);
  StoreLE64(buf, Hash64(buf + 8, used - 8));
}

// A leaf entry's three 4 KiB-aligned values carry the epoch in their free
// bits (node_format.h).
constexpr uint64_t kLow12 = 0xfff;
constexpr unsigned kOffsetHighShift = 52;

struct PackedEntry {
  uint64_t end, cache_offset;
  uint32_t len;
};

PackedEntry PackEpoch(const Extent& e) {
  assert(e.epoch <= kMaxEpoch && e.cache_offset < kMaxCacheOffset);
  assert(e.start % kIndexBlock == 0 && e.len % kIndexBlock == 0 && e.cache_offset % kIndexBlock == 0);
  PackedEntry p;
  p.end = (e.start + e.len) | (e.epoch & kLow12);
  p.len = static_cast<uint32_t>(e.len | ((e.epoch >> 12) & kLow12));
  p.cache_offset = e.cache_offset | ((e.epoch >> 24) & kLow12) | (((e.epoch >> 36) & kLow12) << kOffsetHighShift);
  return p;
}

// Splits the packed values of a version 2 entry; *epoch gets the epoch.
void UnpackEpoch(uint64_t* end, uint64_t* len, uint64_t* cache_offset, uint64_t* epoch) {
  *epoch = (*end & kLow12) | ((*len & kLow12) << 12) | ((*cache_offset & kLow12) << 24) |
           ((*cache_offset >> kOffsetHighShift) << 36);
  *end &= ~kLow12;
  *len &= ~kLow12;
  *cache_offset &= ~kLow12 & (kMaxCacheOffset - 1);
}

std::string Where(uint64_t addr) {
  char s[40];
  snprintf(s, sizeof(s), "btree node %#llx: ", static_cast<unsigned long long>(addr));
  return s;
}

}  // namespace

void EncodeLeafNode(uint8_t* buf, uint32_t node_size, uint32_t shard, uint64_t seq,
                    uint64_t addr, const std::vector<Extent>& extents, uint64_t set_id) {
  assert(extents.size() <= LeafCapacity(node_size));
  uint8_t* p = buf + kNodeHeaderSize;
  for (const Extent& e : extents) {
    assert(e.len <= UINT32_MAX);
    PackedEntry packed = PackEpoch(e);
    StoreLE32(p, e.dev);
    StoreLE64(p + 4, packed.end);
    StoreLE32(p + 12, packed.len);
    StoreLE64(p + 16, packed.cache_offset);
    p[24] = e.gen;
    p[25] = e.dirty ? 1 : 0;
    p += kLeafEntrySize;
  }
  EncodeHeader(buf, node_size, 0, static_cast<uint32_t>(extents.size()), shard, seq, addr,
               set_id, kLeafEntrySize);
}

void EncodeInternalNode(uint8_t* buf, uint32_t node_size, uint8_t level, uint32_t shard,
                        uint64_t seq, uint64_t addr, const std::vector<NodeChildRef>& children,
                        uint64_t set_id) {
  assert(level > 0 && children.size() <= InternalCapacity(node_size));
  uint8_t* p = buf + kNodeHeaderSize;
  for (const NodeChildRef& c : children) {
    StoreLE32(p, c.key.dev);
    StoreLE64(p + 4, c.key.end);
    StoreLE64(p + 12, c.addr);
    p += kInternalEntrySize;
  }
  EncodeHeader(buf, node_size, level, static_cast<uint32_t>(children.size()), shard, seq, addr,
               set_id, kInternalEntrySize);
}

Status DecodeNode(const uint8_t* buf, uint32_t node_size, const NodeExpectation& want,
                  DecodedNode* out) {
  // One cascade, cheapest and most telling checks first; the checksum before
  // anything that interprets entries.
  const char* err = nullptr;
  const uint16_t version = LoadLE16(buf + 12);
  uint8_t level = buf[14];
  uint32_t count = LoadLE32(buf + 16);
  size_t entry_size = level == 0 ? kLeafEntrySize : kInternalEntrySize;
  size_t cap = level == 0 ? LeafCapacity(node_size) : InternalCapacity(node_size);
  if (LoadLE32(buf + 8) != kNodeMagic) {
    err = "bad magic";
  } else if (version != kNodeVersion && version != 1) {
    err = "bad version";
  } else if (level > kMaxLevel) {
    err = "bad level";
  } else if (buf[15] != 0) {
    err = "bad flags";
  } else if (count > cap || (level > 0 && count == 0)) {
    err = "bad count";
  } else if (LoadLE64(buf) != Hash64(buf + 8, kNodeHeaderSize - 8 + count * entry_size)) {
    err = "bad csum";
  } else if (LoadLE64(buf + 32) != want.addr) {
    err = "wrong address";
  } else if (LoadLE64(buf + 40) != want.set_id) {
    err = "wrong set";
  } else if (LoadLE32(buf + 20) != want.shard) {
    err = "wrong shard";
  } else if (want.level >= 0 && level != want.level) {
    err = "wrong level";
  }
  if (err) return Status::Corruption(Where(want.addr) + err);

  out->level = level;
  out->shard = want.shard;
  out->seq = LoadLE64(buf + 24);
  out->extents.clear();
  out->children.clear();
  const uint8_t* p = buf + kNodeHeaderSize;
  if (level == 0) {
    out->extents.reserve(count);
    ExtentKey prev{0, 0};
    for (uint32_t i = 0; i < count; i++, p += kLeafEntrySize) {
      Extent e;
      e.dev = LoadLE32(p);
      uint64_t end = LoadLE64(p + 4);
      e.len = LoadLE32(p + 12);
      e.cache_offset = LoadLE64(p + 16);
      if (version >= 2) UnpackEpoch(&end, &e.len, &e.cache_offset, &e.epoch);
      e.gen = p[24];
      e.dirty = (p[25] & 1) != 0;
      // (A version 1 entry's cache offset is taken whole: it too must be
      // one a leaf of version 2 can hold.)
      if (e.len == 0 || e.len % kIndexBlock != 0 || end % kIndexBlock != 0 || end < e.len ||
          e.cache_offset % kIndexBlock != 0 || e.cache_offset >= kMaxCacheOffset || (p[25] & ~1) != 0) {
        return Status::Corruption(Where(want.addr) + "bad extent");
      }
      e.start = end - e.len;
      // Strictly increasing keys, and no overlap with the previous extent.
      if (i > 0 && (KeyOf(e) <= prev || (e.dev == prev.dev && e.start < prev.end))) {
        return Status::Corruption(Where(want.addr) + "keys out of order");
      }
      prev = KeyOf(e);
      out->extents.push_back(e);
    }
  } else {
    out->children.reserve(count);
    for (uint32_t i = 0; i < count; i++, p += kInternalEntrySize) {
      NodeChildRef c;
      c.key.dev = LoadLE32(p);
      c.key.end = LoadLE64(p + 4);
      c.addr = LoadLE64(p + 12);
      if (c.addr == kNoNode) return Status::Corruption(Where(want.addr) + "bad child");
      if (i > 1 && c.key <= out->children.back().key) {
        return Status::Corruption(Where(want.addr) + "keys out of order");
      }
      out->children.push_back(c);
    }
  }
  return Status::OK();
}

}  // namespace ubcache
