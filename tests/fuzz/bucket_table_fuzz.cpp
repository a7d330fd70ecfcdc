// SPDX-License-Identifier: Apache-2.0
// Fuzzes the bucket table decoder (the first record of every checkpoint's
// journal, doc/format.md "Bucket table"). Input: a flags byte
// (format_fuzz.h), then the table; with kReseal its checksum is recomputed,
// with kTrustIds the set id is taken from the table itself. Invariants: an
// error names its check; nothing is allocated beyond what the input's
// length holds; a decoded table encodes and decodes again to the same
// contents.
#include <cstddef>
#include <cstdint>

#include "cache/bucket_table.h"
#include "tests/fuzz/format_fuzz.h"

using namespace ubcache;
using namespace ubcache::fuzz;

namespace {
constexpr uint64_t kSetId = 0x5e7;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint8_t flags = data[0];
  std::vector<uint8_t> b(data + 1, data + size);
  if (flags & kReseal) ResealRange(b.data(), b.size(), 0, 8, b.size());
  uint64_t set_id = (flags & kTrustIds) && b.size() >= 24 ? LoadLE64(b.data() + 16) : kSetId;
  auto t = BucketTable::Decode(b.data(), b.size(), set_id);
  if (!t.ok()) {
    CheckError(t.status());
    return 0;
  }
  FUZZ_CHECK(t->set_id == set_id);
  FUZZ_CHECK(t->EncodedSize() <= b.size());
  std::vector<uint8_t> enc = t->Encode();
  FUZZ_CHECK(enc.size() == t->EncodedSize());
  auto t2 = BucketTable::Decode(enc.data(), enc.size(), set_id);
  FUZZ_CHECK(t2.ok());
  FUZZ_CHECK(t2->buckets.size() == t->buckets.size() && t2->nodes == t->nodes &&
             t2->devices.size() == t->devices.size() && t2->dirty == t->dirty &&
             t2->next_dev == t->next_dev && t2->node_size == t->node_size &&
             t2->index_generation == t->index_generation);
  for (size_t i = 0; i < t->devices.size(); i++)
    FUZZ_CHECK(t2->devices[i].uuid == t->devices[i].uuid && t2->devices[i].dev == t->devices[i].dev);
  return 0;
}
