#include "cache/bucket_node_store.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <string>

#include "cache/superblock.h"
#include "util/aligned_buffer.h"
#include "util/endian.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/thread.h"

namespace ubcache {
namespace {

// Journal record header (doc/format.md, "Journal records").
constexpr uint32_t kRecordMagic = 0x524a4255;  // "UBJR"
constexpr uint16_t kRecordVersion = 1;
constexpr uint16_t kKindStart = 0;
constexpr uint16_t kKindData = 1;
constexpr size_t kRecordHeader = 64;

struct RecordHeader {
  uint64_t csum;
  uint16_t kind;
  uint64_t set_id, nonce, index, prev_csum;
  uint32_t payload_len, blocks;
};

bool ParseHeader(const uint8_t* p, RecordHeader* h) {
  if (LoadLE32(p + 8) != kRecordMagic || LoadLE16(p + 12) != kRecordVersion) return false;
  h->csum = LoadLE64(p);
  h->kind = LoadLE16(p + 14);
  h->set_id = LoadLE64(p + 16);
  h->nonce = LoadLE64(p + 24);
  h->index = LoadLE64(p + 32);
  h->prev_csum = LoadLE64(p + 40);
  h->payload_len = LoadLE32(p + 48);
  h->blocks = LoadLE32(p + 52);
  return true;
}

uint64_t BlocksFor(uint64_t payload_len, uint32_t block) {
  return (kRecordHeader + payload_len + block - 1) / block;
}

}  // namespace

BucketNodeStore::BucketNodeStore(BlockDevice* dev, BucketAllocator* buckets, Options o)
    : dev_(dev),
      buckets_(buckets),
      o_(o),
      slots_per_bucket_(static_cast<uint32_t>(buckets->options().bucket_size / o.node_size)) {}

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

Status BucketNodeStore::Io(const IoRequest& req) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  Status result;
  reactor_->Post([&] {
    dev_->Submit(req, [&](Status st) {
      std::lock_guard<std::mutex> l(m);
      result = std::move(st);
      done = true;
      cv.notify_one();
    });
  });
  std::unique_lock<std::mutex> l(m);
  cv.wait(l, [&] { return done; });
  if (req.op == IoOp::kRead) counters_.bytes_read += req.len;
  if (req.op == IoOp::kWrite) counters_.bytes_written += req.len;
  return result;
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

Status BucketNodeStore::WriteRecord(uint64_t pos, uint16_t kind, uint64_t index,
                                    uint64_t prev_csum, const uint8_t* payload, size_t len,
                                    uint64_t* csum, uint64_t* blocks) {
  *blocks = BlocksFor(len, o_.block_size);
  uint64_t bytes = *blocks * o_.block_size;
  if (len > UINT32_MAX || pos + bytes > o_.journal_bytes)
    return Status::NoSpace("cache journal full (" + std::to_string(pos) + " of " +
                           std::to_string(o_.journal_bytes) + " bytes used)");
  AlignedBuffer buf(bytes);
  uint8_t* p = buf.data();
  std::memset(p, 0, bytes);
  StoreLE32(p + 8, kRecordMagic);
  StoreLE16(p + 12, kRecordVersion);
  StoreLE16(p + 14, kind);
  StoreLE64(p + 16, o_.set_id);
  StoreLE64(p + 24, nonce_);
  StoreLE64(p + 32, index);
  StoreLE64(p + 40, prev_csum);
  StoreLE32(p + 48, static_cast<uint32_t>(len));
  StoreLE32(p + 52, static_cast<uint32_t>(*blocks));
  if (len) std::memcpy(p + kRecordHeader, payload, len);
  *csum = Hash64(p + 8, kRecordHeader - 8 + len);
  StoreLE64(p, *csum);
  return Io({IoOp::kWrite, kIoFua, o_.journal_offset + pos, bytes, p});
}

Status BucketNodeStore::ResetJournalLocked() {
  UB_ASSIGN_OR_RETURN(Uuid u, RandomUuid());
  uint64_t nonce = LoadLE64(u.data());
  if (nonce == nonce_) nonce++;
  nonce_ = nonce;
  uint64_t csum = 0, blocks = 0;
  journal_open_ = false;
  UB_RETURN_IF_ERROR(WriteRecord(0, kKindStart, 0, 0, nullptr, 0, &csum, &blocks));
  tail_ = blocks * o_.block_size;
  next_index_ = 1;
  last_csum_ = csum;
  records_.clear();
  payload_bytes_ = 0;
  journal_open_ = true;
  return Status::OK();
}

Status BucketNodeStore::ResetJournal() {
  MutexLock l(&jmu_);
  return ResetJournalLocked();
}

Status BucketNodeStore::ScanJournal(std::vector<uint8_t>* payload) {
  payload->clear();
  records_.clear();
  const uint32_t bs = o_.block_size;
  AlignedBuffer head(bs);
  uint64_t pos = 0, index = 0, prev = 0;
  bool started = false;
  for (;;) {
    if (pos + bs > o_.journal_bytes) break;
    UB_RETURN_IF_ERROR(Io({IoOp::kRead, 0, o_.journal_offset + pos, bs, head.data()}));
    RecordHeader h;
    if (!ParseHeader(head.data(), &h) || h.set_id != o_.set_id) break;
    if (!started) {
      if (h.kind != kKindStart || h.index != 0 || h.payload_len != 0) break;
      nonce_ = h.nonce;
    } else if (h.kind != kKindData || h.nonce != nonce_ || h.index != index + 1 ||
               h.prev_csum != prev) {
      break;
    }
    if (h.blocks != BlocksFor(h.payload_len, bs) || pos + uint64_t{h.blocks} * bs > o_.journal_bytes)
      break;
    AlignedBuffer rec(uint64_t{h.blocks} * bs);
    std::memcpy(rec.data(), head.data(), bs);
    if (h.blocks > 1)
      UB_RETURN_IF_ERROR(Io({IoOp::kRead, 0, o_.journal_offset + pos + bs,
                             uint64_t{h.blocks - 1} * bs, rec.data() + bs}));
    if (Hash64(rec.data() + 8, kRecordHeader - 8 + h.payload_len) != h.csum) break;
    if (started) {
      records_.push_back({pos, h.blocks, payload->size(), h.payload_len});
      payload->insert(payload->end(), rec.data() + kRecordHeader,
                      rec.data() + kRecordHeader + h.payload_len);
    }
    started = true;
    index = h.index;
    prev = h.csum;
    pos += uint64_t{h.blocks} * bs;
  }
  if (!started) return Status::NotFound("no journal start record");
  tail_ = pos;
  next_index_ = index + 1;
  last_csum_ = prev;
  payload_bytes_ = payload->size();
  journal_open_ = true;
  return Status::OK();
}

Status BucketNodeStore::OpenJournal() {
  MutexLock l(&jmu_);
  std::vector<uint8_t> payload;
  Status st = ScanJournal(&payload);
  if (st.code() == Status::Code::kNotFound) {
    UB_INFO("cache journal: no valid start record, starting an empty journal");
    return ResetJournalLocked();
  }
  return st;
}

Status BucketNodeStore::AppendJournal(const uint8_t* data, size_t len) {
  MutexLock l(&jmu_);
  if (!journal_open_) return Status::InvalidArgument("node store: journal not open");
  uint64_t csum = 0, blocks = 0;
  UB_RETURN_IF_ERROR(
      WriteRecord(tail_, kKindData, next_index_, last_csum_, data, len, &csum, &blocks));
  records_.push_back({tail_, blocks, payload_bytes_, len});
  tail_ += blocks * o_.block_size;
  next_index_++;
  last_csum_ = csum;
  payload_bytes_ += len;
  counters_.journal_appends++;
  return Status::OK();
}

Status BucketNodeStore::ReadJournal(std::vector<uint8_t>* all) {
  MutexLock l(&jmu_);
  if (!journal_open_) return Status::InvalidArgument("node store: journal not open");
  std::vector<uint8_t> payload;
  uint64_t tail = tail_;
  UB_RETURN_IF_ERROR(ScanJournal(&payload));
  if (tail_ != tail)
    return Status::Corruption("cache journal: reads back " + std::to_string(tail_) +
                              " bytes of records, " + std::to_string(tail) + " were written");
  *all = std::move(payload);
  return Status::OK();
}

Status BucketNodeStore::TrimJournal() {
  MutexLock l(&jmu_);
  return ResetJournalLocked();
}

Status BucketNodeStore::DiscardJournalTail(size_t valid_bytes) {
  MutexLock l(&jmu_);
  if (!journal_open_) return Status::InvalidArgument("node store: journal not open");
  if (valid_bytes >= payload_bytes_) return Status::OK();
  // Keep the records wholly before valid_bytes. The next append takes the
  // first dropped record's index with a different prev csum chain (or the
  // same bytes), so records after it never chain onto the new tail.
  size_t keep = 0;
  while (keep < records_.size() &&
         records_[keep].payload_begin + records_[keep].payload_len <= valid_bytes)
    keep++;
  std::vector<uint8_t> partial;
  if (keep < records_.size() && records_[keep].payload_begin < valid_bytes) {
    // valid_bytes falls inside a record: rewrite it holding only the prefix.
    std::vector<uint8_t> all;
    uint64_t tail = tail_;
    UB_RETURN_IF_ERROR(ScanJournal(&all));
    if (tail_ != tail) return Status::Corruption("cache journal changed under DiscardJournalTail");
    partial.assign(all.begin() + static_cast<long>(records_[keep].payload_begin),
                   all.begin() + static_cast<long>(valid_bytes));
  }
  // Recompute the chain position from the kept records.
  uint64_t pos = keep < records_.size() ? records_[keep].pos : tail_;
  uint64_t prev_csum = 0;
  if (keep == 0) {
    // The start record's csum: read it back.
    AlignedBuffer head(o_.block_size);
    UB_RETURN_IF_ERROR(Io({IoOp::kRead, 0, o_.journal_offset, o_.block_size, head.data()}));
    prev_csum = LoadLE64(head.data());
  } else {
    AlignedBuffer head(o_.block_size);
    UB_RETURN_IF_ERROR(
        Io({IoOp::kRead, 0, o_.journal_offset + records_[keep - 1].pos, o_.block_size, head.data()}));
    prev_csum = LoadLE64(head.data());
  }
  records_.resize(keep);
  tail_ = pos;
  next_index_ = keep + 1;
  last_csum_ = prev_csum;
  payload_bytes_ = keep ? records_.back().payload_begin + records_.back().payload_len : 0;
  if (partial.empty()) {
    // Durably end the journal here: a later scan must not find the dropped
    // records still chained on.
    AlignedBuffer zero(o_.block_size);
    std::memset(zero.data(), 0, o_.block_size);
    UB_RETURN_IF_ERROR(
        Io({IoOp::kWrite, kIoFua, o_.journal_offset + tail_, o_.block_size, zero.data()}));
  } else {
    uint64_t csum = 0, blocks = 0;
    UB_RETURN_IF_ERROR(WriteRecord(tail_, kKindData, next_index_, last_csum_, partial.data(),
                                   partial.size(), &csum, &blocks));
    records_.push_back({tail_, blocks, payload_bytes_, partial.size()});
    tail_ += blocks * o_.block_size;
    next_index_++;
    last_csum_ = csum;
    payload_bytes_ += partial.size();
  }
  return Status::OK();
}

uint64_t BucketNodeStore::journal_used() const {
  MutexLock l(&jmu_);
  return tail_;
}

}  // namespace ubcache
