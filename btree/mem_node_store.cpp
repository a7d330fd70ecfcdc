// SPDX-License-Identifier: Apache-2.0
#include "btree/mem_node_store.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace ubcache {

Result<uint64_t> MemNodeStore::AllocNode() {
  MutexLock l(&mu_);
  uint64_t addr;
  if (!free_.empty()) {
    addr = free_.back();
    free_.pop_back();
  } else {
    addr = next_addr_;
    next_addr_ += node_size_;
  }
  allocated_[addr] = true;
  return addr;
}

void MemNodeStore::FreeNode(uint64_t addr) {
  MutexLock l(&mu_);
  if (allocated_.erase(addr) == 0) return;  // double free: ignore, tests check counts
  nodes_.erase(addr);
  free_.push_back(addr);
}

Status MemNodeStore::WriteNode(uint64_t addr, const uint8_t* data) {
  MutexLock l(&mu_);
  if (fail_writes_) return Status::IoError("mem node store: injected write error");
  if (!allocated_.count(addr)) {
    return Status::InvalidArgument("mem node store: write to unallocated node " +
                                   std::to_string(addr));
  }
  nodes_[addr].assign(data, data + node_size_);
  return Status::OK();
}

Status MemNodeStore::ReadNode(uint64_t addr, uint8_t* data) {
  MutexLock l(&mu_);
  if (fail_reads_) return Status::IoError("mem node store: injected read error");
  auto it = nodes_.find(addr);
  if (it == nodes_.end()) {
    // Like a block that was never written: zeros, which fail "bad magic".
    std::memset(data, 0, node_size_);
    return Status::OK();
  }
  std::memcpy(data, it->second.data(), node_size_);
  return Status::OK();
}

Status MemNodeStore::AppendJournal(const uint8_t* data, size_t len) {
  MutexLock l(&mu_);
  if (fail_writes_) return Status::IoError("mem node store: injected journal error");
  journal_.insert(journal_.end(), data, data + len);
  confirmed_ = journal_.size();  // a hard append flushes what is before it
  return Status::OK();
}

Status MemNodeStore::AppendJournalSoft(const uint8_t* data, size_t len) {
  MutexLock l(&mu_);
  if (fail_writes_) return Status::IoError("mem node store: injected journal error");
  journal_.insert(journal_.end(), data, data + len);
  return Status::OK();
}

Status MemNodeStore::SyncJournal() {
  MutexLock l(&mu_);
  confirmed_ = journal_.size();
  return Status::OK();
}

Status MemNodeStore::ReadJournal(std::vector<uint8_t>* all) {
  MutexLock l(&mu_);
  if (fail_reads_) return Status::IoError("mem node store: injected read error");
  *all = journal_;
  return Status::OK();
}

Status MemNodeStore::ReadJournal(std::vector<uint8_t>* all, size_t* unconfirmed) {
  UB_RETURN_IF_ERROR(ReadJournal(all));
  MutexLock l(&mu_);
  *unconfirmed = std::min(confirmed_, all->size());
  return Status::OK();
}

Status MemNodeStore::TrimJournal() {
  MutexLock l(&mu_);
  journal_.clear();
  confirmed_ = 0;
  return Status::OK();
}

Status MemNodeStore::DiscardJournalTail(size_t valid_bytes) {
  MutexLock l(&mu_);
  if (valid_bytes < journal_.size()) journal_.resize(valid_bytes);
  confirmed_ = std::min(confirmed_, journal_.size());
  return Status::OK();
}

size_t MemNodeStore::allocated_nodes() const {
  MutexLock l(&mu_);
  return allocated_.size();
}

size_t MemNodeStore::journal_size() const {
  MutexLock l(&mu_);
  return journal_.size();
}

void MemNodeStore::FlipNodeByte(uint64_t addr, size_t offset) {
  MutexLock l(&mu_);
  auto it = nodes_.find(addr);
  if (it != nodes_.end() && offset < it->second.size()) it->second[offset] ^= 0x5a;
}

void MemNodeStore::AppendJournalGarbage(const std::vector<uint8_t>& bytes) {
  MutexLock l(&mu_);
  journal_.insert(journal_.end(), bytes.begin(), bytes.end());
  confirmed_ = journal_.size();  // as a (torn) hard append leaves it
}

void MemNodeStore::TruncateJournal(size_t len) {
  MutexLock l(&mu_);
  if (len < journal_.size()) journal_.resize(len);
  confirmed_ = std::min(confirmed_, journal_.size());
}

void MemNodeStore::set_fail_reads(bool fail) {
  MutexLock l(&mu_);
  fail_reads_ = fail;
}

void MemNodeStore::set_fail_writes(bool fail) {
  MutexLock l(&mu_);
  fail_writes_ = fail;
}

}  // namespace ubcache
