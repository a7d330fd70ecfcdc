// SPDX-License-Identifier: Apache-2.0
#include "cache/bucket_node_store.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <string>

#include "cache/superblock.h"
#include "util/aligned_buffer.h"
#include "util/endian.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/thread.h"

namespace ubcache {
namespace {

}  // namespace

BucketNodeStore::BucketNodeStore(BlockDevice* dev, BucketAllocator* buckets, Options o)
    : dev_(dev),
      buckets_(buckets),
      o_(o),
      slots_per_bucket_(static_cast<uint32_t>(buckets->options().bucket_size / o.node_size)),
      journal_([this](const IoRequest& r) { return Io(r); },
               Journal::Options{o.block_size, o.journal_offset, o.journal_bytes, o.set_id}) {}

Result<std::unique_ptr<BucketNodeStore>> BucketNodeStore::Create(BlockDevice* dev,
                                                                 BucketAllocator* buckets,
                                                                 Options o) {
  uint64_t bucket = buckets->options().bucket_size;
  if (o.node_size == 0 || bucket % o.node_size || o.node_size % o.block_size ||
      o.block_size < dev->logical_block_size())
    return Status::InvalidArgument("node store: node size " + std::to_string(o.node_size) +
                                   " does not fit bucket " + std::to_string(bucket) +
                                   " and block " + std::to_string(o.block_size));
  if (o.journal_offset % o.block_size || o.journal_bytes < 2 * o.block_size)
    return Status::InvalidArgument("node store: bad journal area");
  std::unique_ptr<BucketNodeStore> s(new BucketNodeStore(dev, buckets, o));
  // The ring is created on the thread that uses it.
  std::promise<Result<Reactor*>> made;
  auto f = made.get_future();
  s->io_thread_ = std::thread([&made, self = s.get()] {
    SetThreadName("ub-nodeio");
    auto r = Reactor::Create(64);
    if (!r.ok()) {
      made.set_value(r.status());
      return;
    }
    self->reactor_ = std::move(r).value();
    Reactor* rp = self->reactor_.get();
    made.set_value(rp);
    rp->Run();
    self->reactor_.reset();
  });
  auto r = f.get();
  if (!r.ok()) {
    s->io_thread_.join();
    return r.status();
  }
  return s;
}

BucketNodeStore::~BucketNodeStore() {
  if (io_thread_.joinable()) {
    reactor_->Stop();
    io_thread_.join();
  }
}

Status BucketNodeStore::IoOn(BlockDevice* dev, const IoRequest& req) {
  AssertMayBlock("synchronous node store I/O");
  counters_.io_thread_calls++;
  struct Completion {
    Mutex mu;
    CondVar cv;
    bool done GUARDED_BY(mu) = false;
    Status result GUARDED_BY(mu);
  } c;
  reactor_->Post([&] {
    dev->Submit(req, [&](Status st) {
      // Signalled under the lock: the waiter destroys `c` once it sees done.
      MutexLock l(&c.mu);
      c.result = std::move(st);
      c.done = true;
      c.cv.Signal();
    });
  });
  MutexLock l(&c.mu);
  while (!c.done) c.cv.Wait(&c.mu);
  if (dev == dev_ && req.op == IoOp::kRead) counters_.bytes_read += req.len;
  if (dev == dev_ && req.op == IoOp::kWrite) counters_.bytes_written += req.len;
  return c.result;
}

// ---------------------------------------------------------------------------
// Nodes

Status BucketNodeStore::CheckAddr(uint64_t addr) const {
  uint64_t bucket = buckets_->options().bucket_size;
  if (addr % o_.node_size || addr / bucket >= buckets_->options().nbuckets ||
      addr / bucket < buckets_->options().first_bucket)
    return Status::InvalidArgument("node store: bad node address " + std::to_string(addr));
  return Status::OK();
}

Result<uint64_t> BucketNodeStore::AllocNode() {
  MutexLock l(&mu_);
  uint32_t b;
  if (!partial_.empty()) {
    b = *partial_.begin();
  } else {
    UB_ASSIGN_OR_RETURN(BucketAllocator::Space sp, buckets_->AllocateMetadata());
    b = sp.bucket;
    used_[b].assign(slots_per_bucket_, false);
    partial_.insert(b);
  }
  std::vector<bool>& slots = used_[b];
  auto it = std::find(slots.begin(), slots.end(), false);
  uint32_t slot = static_cast<uint32_t>(it - slots.begin());
  *it = true;
  if (std::find(slots.begin(), slots.end(), false) == slots.end()) partial_.erase(b);
  nodes_++;
  return uint64_t{b} * buckets_->options().bucket_size + uint64_t{slot} * o_.node_size;
}

void BucketNodeStore::FreeNode(uint64_t addr) {
  if (!CheckAddr(addr).ok()) return;
  uint64_t bucket = buckets_->options().bucket_size;
  uint32_t b = static_cast<uint32_t>(addr / bucket);
  uint32_t slot = static_cast<uint32_t>(addr % bucket / o_.node_size);
  MutexLock l(&mu_);
  auto it = used_.find(b);
  if (it == used_.end() || !it->second[slot]) return;  // double free: ignore
  it->second[slot] = false;
  nodes_--;
  if (std::find(it->second.begin(), it->second.end(), true) == it->second.end()) {
    used_.erase(it);
    partial_.erase(b);
    buckets_->FreeMetadata(b);
  } else {
    partial_.insert(b);
  }
}

Status BucketNodeStore::WriteNode(uint64_t addr, const uint8_t* data) {
  UB_RETURN_IF_ERROR(CheckAddr(addr));
  AlignedBuffer buf(o_.node_size);
  std::memcpy(buf.data(), data, o_.node_size);
  counters_.node_writes++;
  return Io({IoOp::kWrite, 0, addr, o_.node_size, buf.data()});
}

Status BucketNodeStore::ReadNode(uint64_t addr, uint8_t* data) {
  UB_RETURN_IF_ERROR(CheckAddr(addr));
  AlignedBuffer buf(o_.node_size);
  counters_.node_reads++;
  UB_RETURN_IF_ERROR(Io({IoOp::kRead, 0, addr, o_.node_size, buf.data()}));
  std::memcpy(data, buf.data(), o_.node_size);
  return Status::OK();
}

void BucketNodeStore::ReadNodeAsync(uint64_t addr, NodeReadDone done) {
  if (!Reactor::Current()) {
    NodeStore::ReadNodeAsync(addr, std::move(done));
    return;
  }
  Status st = CheckAddr(addr);
  if (!st.ok()) {
    done(std::move(st), nullptr);
    return;
  }
  counters_.node_reads++;
  auto buf = std::make_unique<AlignedBuffer>(o_.node_size);
  uint8_t* data = buf->data();
  dev_->Read(addr, o_.node_size, data,
             [this, buf = std::move(buf), done = std::move(done)](Status st) mutable {
               if (st.ok()) counters_.bytes_read += o_.node_size;
               done(st, st.ok() ? buf->data() : nullptr);
             });
}

std::vector<uint64_t> BucketNodeStore::AllocatedNodes() const {
  MutexLock l(&mu_);
  std::vector<uint64_t> out;
  out.reserve(nodes_);
  for (const auto& [b, slots] : used_) {
    for (uint32_t i = 0; i < slots.size(); i++) {
      if (slots[i]) out.push_back(uint64_t{b} * buckets_->options().bucket_size + uint64_t{i} * o_.node_size);
    }
  }
  return out;
}

Status BucketNodeStore::RestoreNodes(const std::vector<uint64_t>& addrs) {
  MutexLock l(&mu_);
  if (nodes_ != 0) return Status::InvalidArgument("node store: restore into a used store");
  std::vector<BucketAllocator::BucketState> state = buckets_->ExportState();
  uint64_t bucket = buckets_->options().bucket_size;
  for (uint64_t a : addrs) {
    UB_RETURN_IF_ERROR(CheckAddr(a));
    uint32_t b = static_cast<uint32_t>(a / bucket);
    if (state[b].kind != BucketAllocator::Kind::kMetadata)
      return Status::Corruption("bucket table: node " + std::to_string(a) +
                                " in a bucket that is not metadata");
    auto& slots = used_[b];
    if (slots.empty()) slots.assign(slots_per_bucket_, false);
    uint32_t slot = static_cast<uint32_t>(a % bucket / o_.node_size);
    if (slots[slot]) return Status::Corruption("bucket table: node " + std::to_string(a) + " twice");
    slots[slot] = true;
    nodes_++;
  }
  // A metadata bucket with no node in the table holds nothing reachable.
  for (uint32_t b = 0; b < state.size(); b++) {
    if (state[b].kind == BucketAllocator::Kind::kMetadata && !used_.count(b))
      buckets_->FreeMetadata(b);
  }
  for (const auto& [b, slots] : used_) {
    if (std::find(slots.begin(), slots.end(), false) != slots.end()) partial_.insert(b);
  }
  return Status::OK();
}

size_t BucketNodeStore::allocated_nodes() const {
  MutexLock l(&mu_);
  return nodes_;
}

// ---------------------------------------------------------------------------
// Journal

Status BucketNodeStore::ResetJournal() { return journal_.Reset(); }

Status BucketNodeStore::OpenJournal() {
  Status st = journal_.Open();
  if (st.code() == Status::Code::kNotFound) {
    UB_INFO("cache journal: no valid start record, starting an empty journal");
    return journal_.Reset();
  }
  return st;
}

Status BucketNodeStore::AppendJournal(const uint8_t* data, size_t len) {
  UB_RETURN_IF_ERROR(journal_.Append(Journal::Kind::kIndex, data, len));
  counters_.journal_appends++;
  return Status::OK();
}

Status BucketNodeStore::AppendJournalSoft(const uint8_t* data, size_t len) {
  UB_RETURN_IF_ERROR(journal_.Append(Journal::Kind::kIndex, data, len, true));
  counters_.journal_appends++;
  return Status::OK();
}

void BucketNodeStore::AppendJournalSoftAsync(const std::vector<uint8_t>& entry, IoDone done) {
  journal_.AppendAsync(
      Journal::Kind::kIndex, entry.data(), entry.size(),
      [this](const IoRequest& req, IoDone written) {
        counters_.bytes_written += req.len;
        dev_->Submit(req, std::move(written));
      },
      [this, done = std::move(done)](Status st) mutable {
        if (st.ok()) counters_.journal_appends++;
        done(std::move(st));
      });
}

Status BucketNodeStore::ReadJournal(std::vector<uint8_t>* all) {
  size_t unconfirmed = 0;
  return ReadJournal(all, &unconfirmed);
}

Status BucketNodeStore::ReadJournal(std::vector<uint8_t>* all, size_t* unconfirmed) {
  std::vector<Journal::Record> recs;
  UB_RETURN_IF_ERROR(journal_.Read(&recs));
  all->clear();
  // A hard record's PREFLUSH made every record before it durable, with the
  // data they point at: only soft records after the last hard one are
  // unconfirmed (the start record, not among recs, is hard).
  *unconfirmed = 0;
  for (const Journal::Record& r : recs) {
    if (r.kind == Journal::Kind::kIndex) all->insert(all->end(), r.payload.begin(), r.payload.end());
    if (!r.soft) *unconfirmed = all->size();
  }
  return Status::OK();
}

Status BucketNodeStore::TrimJournal() { return trim_hook_ ? trim_hook_() : journal_.Reset(); }

Status BucketNodeStore::DiscardJournalTail(size_t valid_bytes) {
  std::vector<Journal::Record> recs;
  UB_RETURN_IF_ERROR(journal_.Read(&recs));
  // The index record holding byte valid_bytes of the index's payload.
  uint64_t begin = 0;
  size_t r = 0;
  for (; r < recs.size(); r++) {
    if (recs[r].kind != Journal::Kind::kIndex) continue;
    if (begin + recs[r].payload.size() > valid_bytes) break;
    begin += recs[r].payload.size();
  }
  if (r == recs.size()) return Status::OK();
  // Records of other kinds after the cut would be dropped with it; the
  // bucket generations among them must not be lost, so refuse (the cache
  // set then starts cold rather than trust generations it cannot see).
  for (size_t i = r + 1; i < recs.size(); i++)
    if (recs[i].kind != Journal::Kind::kIndex)
      return Status::Corruption("cache journal: a bad index entry is followed by other records");
  if (begin == valid_bytes) return journal_.Truncate(r, nullptr);
  std::vector<uint8_t> partial(recs[r].payload.begin(),
                               recs[r].payload.begin() + static_cast<long>(valid_bytes - begin));
  return journal_.Truncate(r, &partial);
}

}  // namespace ubcache
