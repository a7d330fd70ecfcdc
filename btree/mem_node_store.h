// SPDX-License-Identifier: Apache-2.0
// MemNodeStore: a NodeStore in memory, for tests and tools. It plays the
// cache device: it survives the ExtentIndex that uses it, so a test "crashes"
// the index by destroying it and reopens on the same store.
//
// Thread-safe (one mutex, a leaf: taken under the index's shard and commit
// mutexes; it is a test double, not a hot path).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "btree/node_store.h"
#include "util/thread_annotations.h"

namespace ubcache {

class MemNodeStore final : public NodeStore {
 public:
  explicit MemNodeStore(uint32_t node_size = 64 * 1024) : node_size_(node_size) {}

  uint32_t node_size() const override { return node_size_; }
  Result<uint64_t> AllocNode() override;
  void FreeNode(uint64_t addr) override;
  Status WriteNode(uint64_t addr, const uint8_t* data) override;
  Status ReadNode(uint64_t addr, uint8_t* data) override;
  Status AppendJournal(const uint8_t* data, size_t len) override;
  // Soft appends are kept like any other; until SyncJournal (or a hard
  // append) ReadJournal reports them unconfirmed.
  Status AppendJournalSoft(const uint8_t* data, size_t len) override;
  Status SyncJournal() override;
  Status ReadJournal(std::vector<uint8_t>* all) override;
  Status ReadJournal(std::vector<uint8_t>* all, size_t* unconfirmed) override;
  Status TrimJournal() override;
  Status DiscardJournalTail(size_t valid_bytes) override;

  // Test hooks.
  size_t allocated_nodes() const;   // allocated and not freed
  size_t journal_size() const;
  void FlipNodeByte(uint64_t addr, size_t offset);  // corrupt a stored node
  void AppendJournalGarbage(const std::vector<uint8_t>& bytes);  // a torn (hard) append
  void TruncateJournal(size_t len);
  void set_fail_reads(bool fail);
  void set_fail_writes(bool fail);

 private:
  const uint32_t node_size_;
  mutable Mutex mu_;
  std::map<uint64_t, std::vector<uint8_t>> nodes_ GUARDED_BY(mu_);  // written nodes
  std::map<uint64_t, bool> allocated_ GUARDED_BY(mu_);
  std::vector<uint64_t> free_ GUARDED_BY(mu_);
  uint64_t next_addr_ GUARDED_BY(mu_) = 0;
  std::vector<uint8_t> journal_ GUARDED_BY(mu_);
  size_t confirmed_ GUARDED_BY(mu_) = 0;  // journal_ bytes before the first unsynced soft append
  bool fail_reads_ GUARDED_BY(mu_) = false;
  bool fail_writes_ GUARDED_BY(mu_) = false;
};

}  // namespace ubcache
