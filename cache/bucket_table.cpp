// SPDX-License-Identifier: Apache-2.0
#include "cache/bucket_table.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "util/endian.h"
#include "util/hash.h"

namespace ubcache {
namespace {

constexpr uint32_t kTableMagic = 0x54424255;  // "UBBT"
constexpr uint16_t kTableVersion = 2;  // 2: + the index's dirty accounting

}  // namespace

// Layout (doc/format.md, "Bucket table"):
//   0 u64 csum (XXH3-64 of [8, end))  8 u32 magic  12 u16 version  14 u16 0
//  16 u64 set_id  24 u64 index_generation  32 u64 nbuckets  40 u64 nnodes
//  48 u32 ndevices  52 u32 next_dev  56 u32 node_size  60 u32 dirty_len
//  64: nbuckets x {u8 gen, u8 gc_gen, u8 kind, u8 0, u16 prio}
//      nnodes x u64 addr, ndevices x {uuid, u32 dev, u32 0}, dirty_len bytes
std::vector<uint8_t> BucketTable::Encode() const {
  std::vector<uint8_t> out(EncodedSize(), 0);
  uint8_t* p = out.data();
  StoreLE32(p + 8, kTableMagic);
  StoreLE16(p + 12, kTableVersion);
  StoreLE64(p + 16, set_id);
  StoreLE64(p + 24, index_generation);
  StoreLE64(p + 32, buckets.size());
  StoreLE64(p + 40, nodes.size());
  StoreLE32(p + 48, static_cast<uint32_t>(devices.size()));
  StoreLE32(p + 52, next_dev);
  StoreLE32(p + 56, node_size);
  StoreLE32(p + 60, static_cast<uint32_t>(dirty.size()));
  uint8_t* q = p + kHeaderSize;
  for (const auto& b : buckets) {
    q[0] = b.gen;
    q[1] = b.gc_gen;
    q[2] = static_cast<uint8_t>(b.kind);
    StoreLE16(q + 4, b.prio);
    q += 6;
  }
  for (uint64_t a : nodes) {
    StoreLE64(q, a);
    q += 8;
  }
  for (const auto& d : devices) {
    std::memcpy(q, d.uuid.data(), 16);
    StoreLE32(q + 16, d.dev);
    q += 24;
  }
  if (!dirty.empty()) std::memcpy(q, dirty.data(), dirty.size());
  StoreLE64(p, Hash64(p + 8, out.size() - 8));
  return out;
}

Result<BucketTable> BucketTable::Decode(const uint8_t* p, size_t len, uint64_t set_id) {
  auto bad = [](const char* what) { return Status::Corruption(std::string("bucket table: ") + what); };
  if (len < kHeaderSize) return bad("short");
  if (LoadLE32(p + 8) != kTableMagic) return bad("bad magic");
  if (LoadLE16(p + 12) != kTableVersion) return bad("bad version");
  BucketTable t;
  uint64_t nb = LoadLE64(p + 32), nn = LoadLE64(p + 40);
  uint32_t nd = LoadLE32(p + 48);
  if (nb > len || nn > len || nd > len) return bad("bad length");
  t.buckets.resize(nb);
  t.nodes.resize(nn);
  t.devices.resize(nd);
  uint32_t nx = LoadLE32(p + 60);
  if (nx > len) return bad("bad length");
  t.dirty.resize(nx);
  if (t.EncodedSize() != len) return bad("bad length");
  if (LoadLE64(p) != Hash64(p + 8, len - 8)) return bad("bad csum");
  t.set_id = LoadLE64(p + 16);
  if (t.set_id != set_id) return bad("wrong set");
  t.index_generation = LoadLE64(p + 24);
  t.next_dev = LoadLE32(p + 52);
  t.node_size = LoadLE32(p + 56);
  const uint8_t* q = p + kHeaderSize;
  for (auto& b : t.buckets) {
    if (q[2] > static_cast<uint8_t>(BucketAllocator::Kind::kReserved)) return bad("bad kind");
    b.gen = q[0];
    b.gc_gen = q[1];
    b.kind = static_cast<BucketAllocator::Kind>(q[2]);
    b.prio = LoadLE16(q + 4);
    q += 6;
  }
  for (uint64_t& a : t.nodes) {
    a = LoadLE64(q);
    q += 8;
  }
  for (auto& d : t.devices) {
    std::memcpy(d.uuid.data(), q, 16);
    d.dev = LoadLE32(q + 16);
    q += 24;
  }
  std::copy(q, q + nx, t.dirty.begin());
  return t;
}

}  // namespace ubcache
