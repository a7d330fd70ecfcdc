// SPDX-License-Identifier: Apache-2.0
// BucketTable: what every checkpoint saves besides the index root, so that a
// start — after a clean shutdown or a crash — reads no more than the
// superblock, this table, the index's root nodes and the journal tail
// (doc/format.md, "Bucket table").
//
// Per bucket its generation, GC generation, kind and priority; the node
// slots the index's nodes occupy; and which backing device (by its bcache
// uuid) has which device number in the index; and the index's dirty
// accounting. Written as the first record of the journal the checkpoint
// starts (cache/journal.h, kind kTable), which the cache superblock names.
//
// Thread safety: a value; the codec functions are pure.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cache/bucket_allocator.h"
#include "cache/superblock.h"
#include "util/status.h"

namespace ubcache {

struct BucketTable {
  struct Device {
    Uuid uuid{};
    uint32_t dev = 0;
  };
  uint64_t set_id = 0;
  uint64_t index_generation = 0;  // IndexRoot::generation of the root saved with it
  uint32_t node_size = 0;
  uint32_t next_dev = 0;  // the lowest device number never handed out
  std::vector<BucketAllocator::BucketState> buckets;
  std::vector<uint64_t> nodes;  // allocated node addresses
  std::vector<Device> devices;
  std::vector<uint8_t> dirty;  // ExtentIndex::CheckpointState::dirty (version 2)

  static constexpr size_t kHeaderSize = 64;
  size_t EncodedSize() const {
    return kHeaderSize + 6 * buckets.size() + 8 * nodes.size() + 24 * devices.size() + dirty.size();
  }
  std::vector<uint8_t> Encode() const;
  // Errors: Corruption("bucket table: <check>") — short, bad magic, bad
  // version, bad length, bad csum, wrong set, bad kind.
  static Result<BucketTable> Decode(const uint8_t* data, size_t len, uint64_t set_id);
};

}  // namespace ubcache
