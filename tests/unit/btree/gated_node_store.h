// SPDX-License-Identifier: Apache-2.0
// GatedNodeStore: a MemNodeStore whose asynchronous node reads complete only
// when the test says so (Release), for the serving-reactor tests of the
// extent index. A read takes its copy of the node when it is issued, as a
// device read would, so a write of the same address before Release is not
// in it. Synchronous reads and node writes are counted.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "btree/mem_node_store.h"

namespace ubcache::testing {

class GatedNodeStore final : public NodeStore {
 public:
  explicit GatedNodeStore(uint32_t node_size) : mem_(node_size) {}

  uint32_t node_size() const override { return mem_.node_size(); }
  Result<uint64_t> AllocNode() override { return mem_.AllocNode(); }
  void FreeNode(uint64_t addr) override { mem_.FreeNode(addr); }
  Status WriteNode(uint64_t addr, const uint8_t* data) override {
    writes_++;
    return mem_.WriteNode(addr, data);
  }
  Status ReadNode(uint64_t addr, uint8_t* data) override {
    sync_reads_++;
    return mem_.ReadNode(addr, data);
  }
  void ReadNodeAsync(uint64_t addr, NodeReadDone done) override {
    Read r;
    r.data.resize(node_size());
    r.status = mem_.ReadNode(addr, r.data.data());
    r.done = std::move(done);
    gated_.push_back(std::move(r));
  }
  Status AppendJournal(const uint8_t* data, size_t len) override {
    return mem_.AppendJournal(data, len);
  }
  Status ReadJournal(std::vector<uint8_t>* all) override { return mem_.ReadJournal(all); }
  Status TrimJournal() override { return mem_.TrimJournal(); }
  Status DiscardJournalTail(size_t valid_bytes) override {
    return mem_.DiscardJournalTail(valid_bytes);
  }

  // Completes every read issued so far, oldest first.
  void Release() {
    std::deque<Read> now;
    now.swap(gated_);
    for (Read& r : now) r.done(r.status, r.status.ok() ? r.data.data() : nullptr);
  }
  size_t gated() const { return gated_.size(); }
  uint64_t sync_reads() const { return sync_reads_; }
  uint64_t writes() const { return writes_; }

 private:
  struct Read {
    std::vector<uint8_t> data;
    Status status;
    NodeReadDone done;
  };
  MemNodeStore mem_;
  std::deque<Read> gated_;
  uint64_t sync_reads_ = 0;
  uint64_t writes_ = 0;
};

}  // namespace ubcache::testing
