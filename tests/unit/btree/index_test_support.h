// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the btree unit tests.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "btree/extent_index.h"
#include "btree/mem_node_store.h"

namespace ubcache::testing {

constexpr uint64_t K = 4096;

inline Extent Ext(uint32_t dev, uint64_t start_blk, uint64_t len_blk, uint64_t cache_blk,
                  uint8_t gen = 0, bool dirty = false) {
  return Extent{dev, start_blk * K, len_blk * K, cache_blk * K, gen, dirty};
}

inline std::unique_ptr<ExtentIndex> MustCreate(NodeStore* store, ExtentIndex::Options o = {}) {
  auto r = ExtentIndex::Create(store, o);
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline std::unique_ptr<ExtentIndex> MustOpen(NodeStore* store, const IndexRoot& root,
                                             ExtentIndex::Options o = {}) {
  auto r = ExtentIndex::Open(store, root, o);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline std::vector<Extent> LookupAll(ExtentIndex& idx, uint32_t dev, uint64_t start_blk,
                                     uint64_t len_blk) {
  std::vector<Extent> out;
  Status st = idx.Lookup(dev, start_blk * K, len_blk * K, &out);
  INFO(st.ToString());
  REQUIRE(st.ok());
  return out;
}

inline std::vector<Extent> AllExtents(ExtentIndex& idx) {
  std::vector<Extent> all;
  REQUIRE(idx.ForEach([&](const Extent& e) { all.push_back(e); }).ok());
  std::sort(all.begin(), all.end(), [](const Extent& a, const Extent& b) {
    return KeyOf(a) < KeyOf(b);
  });
  return all;
}

}  // namespace ubcache::testing

namespace Catch {
template <>
struct StringMaker<ubcache::Extent> {
  static std::string convert(const ubcache::Extent& e) {
    return "{dev " + std::to_string(e.dev) + " [" + std::to_string(e.start / 4096) + "+" +
           std::to_string(e.len / 4096) + ") @" + std::to_string(e.cache_offset / 4096) +
           " gen " + std::to_string(e.gen) + (e.dirty ? " dirty}" : "}");
  }
};
}  // namespace Catch
