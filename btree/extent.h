// SPDX-License-Identifier: Apache-2.0
// Extent: one cached range of one backing device, and the key that orders
// extents in the index. In-memory form only; the on-disk forms are in
// node_format.h and journal_format.h.
#pragma once

#include <compare>
#include <cstdint>

namespace ubcache {

inline constexpr uint64_t kIndexBlock = 4096;  // start/len granularity

struct Extent {
  uint32_t dev = 0;           // backing device index in the cache set
  uint64_t start = 0;         // byte range on the backing device,
  uint64_t len = 0;           //   multiples of kIndexBlock
  uint64_t cache_offset = 0;  // byte offset of the data on the cache device
  uint8_t gen = 0;            // bucket generation when written
  bool dirty = false;         // data newer than the backing device
  // Dirty extents: the write epoch of the data (btree/write_epoch.h), kept
  // by every copy, clip and move; < 2^48 (the node format's room). Clean: 0.
  uint64_t epoch = 0;

  uint64_t end() const { return start + len; }
  bool operator==(const Extent&) const = default;
};

// Extents are keyed as bcache keys them: by (device, END offset). A lookup of
// [s, e) then starts at the first key > (dev, s), the first extent that can
// overlap, and trimming an extent's front (the common overwrite case) keeps
// its key, so it is an in-place update.
struct ExtentKey {
  uint32_t dev = 0;
  uint64_t end = 0;
  auto operator<=>(const ExtentKey&) const = default;
};

inline ExtentKey KeyOf(const Extent& e) { return {e.dev, e.start + e.len}; }

}  // namespace ubcache
