// SPDX-License-Identifier: Apache-2.0
// The node store and checks the index fuzz targets share.
#pragma once

#include <map>
#include <vector>

#include "btree/extent_index.h"
#include "btree/node_store.h"
#include "tests/fuzz/format_fuzz.h"

namespace ubcache::fuzz {

// A node store whose nodes and journal are whatever the input says. Nodes
// the index writes (a checkpoint) go to fresh addresses past the input's.
class FuzzNodeStore final : public NodeStore {
 public:
  explicit FuzzNodeStore(uint32_t node_size) : node_size_(node_size) {}
  uint32_t node_size() const override { return node_size_; }
  Result<uint64_t> AllocNode() override {
    uint64_t a = next_;
    next_ += node_size_;
    return a;
  }
  void FreeNode(uint64_t) override {}
  Status WriteNode(uint64_t addr, const uint8_t* data) override {
    nodes_[addr].assign(data, data + node_size_);
    if (addr + node_size_ > next_) next_ = addr + node_size_;
    return Status::OK();
  }
  Status ReadNode(uint64_t addr, uint8_t* data) override {
    auto it = nodes_.find(addr);
    if (it == nodes_.end()) return Status::IoError("no node at " + std::to_string(addr));
    std::memcpy(data, it->second.data(), node_size_);
    return Status::OK();
  }
  Status AppendJournal(const uint8_t* data, size_t len) override {
    journal_.insert(journal_.end(), data, data + len);
    return Status::OK();
  }
  Status ReadJournal(std::vector<uint8_t>* all) override {
    *all = journal_;
    return Status::OK();
  }
  Status TrimJournal() override {
    journal_.clear();
    return Status::OK();
  }
  Status DiscardJournalTail(size_t valid_bytes) override {
    FUZZ_CHECK(valid_bytes <= journal_.size());
    journal_.resize(valid_bytes);
    return Status::OK();
  }
  std::vector<uint8_t>& journal() { return journal_; }

 private:
  const uint32_t node_size_;
  std::map<uint64_t, std::vector<uint8_t>> nodes_;
  std::vector<uint8_t> journal_;
  uint64_t next_ = 0;
};

// Reseals every journal entry of `j` in place, walking by payload_len, and
// with `seq_from` numbers them consecutively from it (so replay applies
// them rather than stopping at a sequence gap).
inline void ResealJournal(std::vector<uint8_t>* j, uint64_t set_id, const uint64_t* seq_from) {
  size_t o = 0;
  uint64_t seq = seq_from ? *seq_from : 0;
  while (o + 40 <= j->size()) {
    uint8_t* p = j->data() + o;
    size_t payload = LoadLE32(p + 24);
    if (payload > j->size() - o - 40) break;
    if (seq_from) {
      StoreLE64(p + 16, seq++);
      StoreLE64(p + 32, set_id);
    }
    StoreLE64(p, Hash64(p + 8, 32 + payload));
    o += 40 + payload;
  }
}

// What an opened index must hold whatever it was opened from: every
// extent a lookup returns is inside the range asked, in order, and no two
// overlap; ForEach walks every shard without error. Bounded work: at most a few devices and ranges.
inline void CheckIndex(ExtentIndex* index) {
  std::vector<Extent> all;
  Status st = index->ForEach([&](const Extent& e) { all.push_back(e); });
  if (!st.ok()) return CheckError(st);
  for (const Extent& e : all) FUZZ_CHECK(e.len > 0);
  for (uint32_t dev : {0u, 1u}) {
    std::vector<Extent> got;
    st = index->Lookup(dev, 0, 1ull << 40, &got);
    if (!st.ok()) return CheckError(st);
    for (size_t i = 0; i < got.size(); i++) {
      FUZZ_CHECK(got[i].dev == dev && got[i].len > 0 && got[i].end() <= (1ull << 40));
      if (i > 0) FUZZ_CHECK(got[i - 1].end() <= got[i].start);
    }
  }
}

}  // namespace ubcache::fuzz
