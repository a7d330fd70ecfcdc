// SPDX-License-Identifier: Apache-2.0
// Fuzzes the journal: the entry decoder over a stream of records, and
// replay of that stream into an index (ExtentIndex::Open after a
// checkpoint, as a restart after a crash does it). Input: a flags byte
// (format_fuzz.h), then the journal bytes; with kReseal every entry's
// checksum is recomputed, with kTrustIds entries are also renumbered from
// the checkpoint's sequence and given its set id, so replay applies them.
// Invariants: an error names its check; each entry consumed is whole and
// inside the input; replay ends in an index whose lookups are ordered,
// inside their range and free of overlaps — or in a clear error.
#include <cstddef>
#include <cstdint>

#include "btree/journal_format.h"
#include "tests/fuzz/index_fuzz.h"
#include "util/log.h"

using namespace ubcache;
using namespace ubcache::fuzz;

namespace {
constexpr uint64_t kSetId = 0x5e7;
constexpr uint32_t kNodeSize = 4096;

ExtentIndex::Options Options() {
  ExtentIndex::Options o;
  o.shards = 2;
  o.stripe_bytes = 1 << 20;
  o.set_id = kSetId;
  o.cache_bytes = 1 << 20;
  return o;
}

}  // namespace

// The index warns about what it finds wrong (a replay that ends early, a
// bad node): a line per input, millions in a long run, slowing it down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)ubcache::SetLogLevel("off");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint8_t flags = data[0];
  std::vector<uint8_t> j(data + 1, data + size);

  // A small index, checkpointed once: each input's journal replays onto a
  // copy of its store.
  static const auto* base = [] {
    auto* b = new std::pair<FuzzNodeStore, IndexRoot>(FuzzNodeStore(kNodeSize), IndexRoot{});
    auto idx = ExtentIndex::Create(&b->first, Options());
    FUZZ_CHECK(idx.ok());
    for (uint64_t i = 0; i < 4; i++)
      FUZZ_CHECK((*idx)->Insert({static_cast<uint32_t>(i % 2), i << 16, 8192, i << 20, 1, i == 3}).ok());
    FUZZ_CHECK((*idx)->Commit().ok());
    auto r = (*idx)->Checkpoint();
    FUZZ_CHECK(r.ok());
    b->second = *r;
    return b;
  }();
  FuzzNodeStore store = base->first;
  const IndexRoot& root = base->second;
  if (flags & kReseal) {
    uint64_t next = root.journal_seq + 1;
    ResealJournal(&j, kSetId, (flags & kTrustIds) ? &next : nullptr);
  }

  // The records one by one, as replay scans them.
  size_t off = 0;
  while (off < j.size()) {
    size_t len = 0;
    uint64_t seq = 0;
    std::vector<JournalOp> ops;
    Status st = DecodeJournalEntry(j.data() + off, j.size() - off, &len, &seq, &ops, kSetId);
    if (!st.ok()) {
      CheckError(st);
      break;
    }
    FUZZ_CHECK(len >= kJournalHeaderSize && len <= j.size() - off);
    FUZZ_CHECK(ops.size() <= len);  // every op takes at least one byte
    for (const JournalOp& op : ops) {
      if (op.type == JournalOp::Type::kInsert) FUZZ_CHECK(op.extent.len > 0);
    }
    off += len;
  }

  // Replay.
  FUZZ_CHECK(store.AppendJournal(j.data(), j.size()).ok());
  auto idx = ExtentIndex::Open(&store, root, Options());
  if (!idx.ok()) {
    CheckError(idx.status());
    return 0;
  }
  CheckIndex(idx->get());
  FUZZ_CHECK(store.journal().size() <= j.size());  // a torn tail is dropped, never grown
  return 0;
}
