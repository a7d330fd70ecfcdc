// SPDX-License-Identifier: Apache-2.0
#include "cache/journal.h"

#include <cstring>
#include <memory>
#include <string>

#include "cache/superblock.h"
#include "util/aligned_buffer.h"
#include "util/endian.h"
#include "util/hash.h"

namespace ubcache {
namespace {

// Record header (doc/format.md, "Journal records").
constexpr uint32_t kRecordMagic = 0x524a4255;  // "UBJR"
constexpr uint16_t kRecordVersion = 1;
constexpr size_t kRecordHeader = 64;
constexpr uint16_t kMaxKind = static_cast<uint16_t>(Journal::Kind::kTable);

constexpr uint32_t kRecordSoft = 1;  // flags: written without PREFLUSH | FUA

struct RecordHeader {
  uint64_t csum;
  uint16_t kind;
  uint64_t set_id, nonce, index, prev_csum;
  uint32_t payload_len, blocks, flags;
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
  h->flags = LoadLE32(p + 56);
  return (h->flags & ~kRecordSoft) == 0 && LoadLE32(p + 60) == 0;
}

uint64_t BlocksFor(uint64_t payload_len, uint32_t block) {
  return (kRecordHeader + payload_len + block - 1) / block;
}

}  // namespace

Status Journal::FitsLocked(uint64_t pos, uint64_t bytes, size_t len) const {
  if (len > UINT32_MAX || pos + bytes > o_.bytes)
    return Status::NoSpace("cache journal full (" + std::to_string(pos) + " of " + std::to_string(o_.bytes) +
                           " bytes used)");
  return Status::OK();
}

uint64_t Journal::EncodeRecord(uint8_t* p, uint64_t bytes, Kind kind, uint64_t index, uint64_t prev_csum,
                               const uint8_t* payload, size_t len, bool soft) {
  std::memset(p, 0, bytes);
  StoreLE32(p + 8, kRecordMagic);
  StoreLE16(p + 12, kRecordVersion);
  StoreLE16(p + 14, static_cast<uint16_t>(kind));
  StoreLE64(p + 16, o_.set_id);
  StoreLE64(p + 24, nonce_);
  StoreLE64(p + 32, index);
  StoreLE64(p + 40, prev_csum);
  StoreLE32(p + 48, static_cast<uint32_t>(len));
  StoreLE32(p + 52, static_cast<uint32_t>(bytes / o_.block_size));
  StoreLE32(p + 56, soft ? kRecordSoft : 0);
  if (len) std::memcpy(p + kRecordHeader, payload, len);
  uint64_t csum = Hash64(p + 8, kRecordHeader - 8 + len);
  StoreLE64(p, csum);
  return csum;
}

Status Journal::WriteRecord(uint64_t pos, Kind kind, uint64_t index, uint64_t prev_csum,
                            const uint8_t* payload, size_t len, bool soft, uint64_t* csum,
                            uint64_t* blocks) {
  *blocks = BlocksFor(len, o_.block_size);
  uint64_t bytes = *blocks * o_.block_size;
  UB_RETURN_IF_ERROR(FitsLocked(pos, bytes, len));
  AlignedBuffer buf(bytes);
  uint8_t* p = buf.data();
  *csum = EncodeRecord(p, bytes, kind, index, prev_csum, payload, len, soft);
  if (soft) {
    // Only as far as the device: durable at the next flush (a later hard
    // record's PREFLUSH, or Sync).
    UB_RETURN_IF_ERROR(io_({IoOp::kWrite, 0, o_.offset + pos, bytes, p}));
    unflushed_ = true;
    return Status::OK();
  }
  // PREFLUSH: cached data that completed before this call is on media
  // before the record that finds it (and so is every soft record before
  // this one). FUA: the record is, on return.
  UB_RETURN_IF_ERROR(io_({IoOp::kFlush, 0, 0, 0, nullptr}));
  unflushed_ = false;
  return io_({IoOp::kWrite, kIoFua, o_.offset + pos, bytes, p});
}

void Journal::WaitAsyncLocked() {
  while (async_) async_cv_.Wait(&mu_);
}

bool Journal::BeginAsync() {
  if (!mu_.TryLock()) return false;
  bool ok = open_ && !async_;
  if (ok) async_ = true;
  mu_.Unlock();
  return ok;
}

void Journal::CancelAsync() {
  {
    MutexLock l(&mu_);
    async_ = false;
  }
  async_cv_.SignalAll();
}

void Journal::AppendAsync(Kind kind, const uint8_t* data, size_t len, const SubmitFn& submit,
                          Callback<void(Status)> done) {
  const uint64_t blocks = BlocksFor(len, o_.block_size);
  const uint64_t bytes = blocks * o_.block_size;
  auto buf = std::make_unique<AlignedBuffer>(bytes);
  uint64_t pos = 0, at = 0;
  Status err;
  {
    MutexLock l(&mu_);
    // mu_ is not held across any I/O while async_ is set (the other methods
    // wait for it first), so this lock is brief even on a serving reactor.
    pos = tail_;
    err = open_ ? FitsLocked(pos, bytes, len) : Status::InvalidArgument("cache journal: not open");
    if (!err.ok()) {
      async_ = false;
    } else {
      uint64_t prev = placed_.empty() ? start_csum_ : placed_.back().csum;
      uint64_t csum = EncodeRecord(buf->data(), bytes, kind, placed_.size() + 1, prev, data, len, true);
      // Placed now, so the next record chains onto it; taken back if the
      // write fails (the next one then takes its place and its index).
      placed_.push_back({pos, blocks, csum});
      SetTailLocked(pos + bytes);
      unflushed_ = true;
      at = o_.offset + pos;
    }
  }
  if (!err.ok()) {
    async_cv_.SignalAll();
    done(err);
    return;
  }
  IoRequest req{IoOp::kWrite, 0, at, bytes, buf->data()};
  submit(req, [this, buf = std::move(buf), pos, done = std::move(done)](Status st) mutable {
    {
      MutexLock l(&mu_);
      if (!st.ok()) {
        placed_.pop_back();
        SetTailLocked(pos);
      }
      async_ = false;
    }
    async_cv_.SignalAll();
    buf.reset();
    done(std::move(st));
  });
}

Status Journal::Sync() {
  MutexLock l(&mu_);
  WaitAsyncLocked();
  if (!unflushed_) return Status::OK();
  UB_RETURN_IF_ERROR(io_({IoOp::kFlush, 0, 0, 0, nullptr}));
  unflushed_ = false;
  return Status::OK();
}

Status Journal::Reset(const std::vector<Record>& carry) {
  MutexLock l(&mu_);
  WaitAsyncLocked();
  return ResetLocked(carry);
}

Status Journal::SwitchTo(uint64_t offset, uint64_t bytes, const std::vector<Record>& carry, bool scan) {
  MutexLock l(&mu_);
  WaitAsyncLocked();
  o_.offset = offset;
  o_.bytes = bytes;
  capacity_.store(bytes, std::memory_order_relaxed);
  open_ = false;
  return scan ? Scan(nullptr) : ResetLocked(carry);
}

uint64_t Journal::offset() const {
  MutexLock l(&mu_);
  return o_.offset;
}

Status Journal::ResetLocked(const std::vector<Record>& carry) {
  UB_ASSIGN_OR_RETURN(Uuid u, RandomUuid());
  uint64_t nonce = LoadLE64(u.data());
  if (nonce == nonce_) nonce++;
  nonce_ = nonce;
  uint64_t csum = 0, blocks = 0;
  open_ = false;
  UB_RETURN_IF_ERROR(WriteRecord(0, Kind::kStart, 0, 0, nullptr, 0, false, &csum, &blocks));
  SetTailLocked(blocks * o_.block_size);
  start_csum_ = csum;
  placed_.clear();
  open_ = true;
  for (const Record& r : carry)
    UB_RETURN_IF_ERROR(AppendLocked(r.kind, r.payload.data(), r.payload.size(), false));
  return Status::OK();
}

Status Journal::Scan(std::vector<Record>* out) {
  if (out) out->clear();
  placed_.clear();
  const uint32_t bs = o_.block_size;
  AlignedBuffer head(bs);
  uint64_t pos = 0, index = 0, prev = 0;
  bool started = false;
  for (;;) {
    if (pos + bs > o_.bytes) break;
    UB_RETURN_IF_ERROR(io_({IoOp::kRead, 0, o_.offset + pos, bs, head.data()}));
    RecordHeader h;
    if (!ParseHeader(head.data(), &h) || h.set_id != o_.set_id) break;
    if (!started) {
      if (h.kind != static_cast<uint16_t>(Kind::kStart) || h.index != 0 || h.payload_len != 0) break;
      nonce_ = h.nonce;
    } else if (h.kind == static_cast<uint16_t>(Kind::kStart) || h.kind > kMaxKind ||
               h.nonce != nonce_ || h.index != index + 1 || h.prev_csum != prev) {
      break;
    }
    if (h.blocks != BlocksFor(h.payload_len, bs) || pos + uint64_t{h.blocks} * bs > o_.bytes) break;
    AlignedBuffer rec(uint64_t{h.blocks} * bs);
    std::memcpy(rec.data(), head.data(), bs);
    if (h.blocks > 1)
      UB_RETURN_IF_ERROR(io_({IoOp::kRead, 0, o_.offset + pos + bs, uint64_t{h.blocks - 1} * bs,
                              rec.data() + bs}));
    if (Hash64(rec.data() + 8, kRecordHeader - 8 + h.payload_len) != h.csum) break;
    if (started) {
      placed_.push_back({pos, h.blocks, h.csum});
      if (out)
        out->push_back({static_cast<Kind>(h.kind),
                        std::vector<uint8_t>(rec.data() + kRecordHeader,
                                             rec.data() + kRecordHeader + h.payload_len),
                        (h.flags & kRecordSoft) != 0});
    } else {
      start_csum_ = h.csum;
    }
    started = true;
    index = h.index;
    prev = h.csum;
    pos += uint64_t{h.blocks} * bs;
  }
  if (!started) return Status::NotFound("no journal start record");
  SetTailLocked(pos);
  open_ = true;
  unflushed_ = true;  // what was read may still be only in the device's cache
  return Status::OK();
}

Status Journal::Open() {
  MutexLock l(&mu_);
  WaitAsyncLocked();
  return Scan(nullptr);
}

Status Journal::AppendLocked(Kind kind, const uint8_t* data, size_t len, bool soft) {
  if (!open_) return Status::InvalidArgument("cache journal: not open");
  uint64_t prev = placed_.empty() ? start_csum_ : placed_.back().csum;
  uint64_t csum = 0, blocks = 0;
  UB_RETURN_IF_ERROR(
      WriteRecord(tail_, kind, placed_.size() + 1, prev, data, len, soft, &csum, &blocks));
  placed_.push_back({tail_, blocks, csum});
  SetTailLocked(tail_ + blocks * o_.block_size);
  return Status::OK();
}

Status Journal::Append(Kind kind, const uint8_t* data, size_t len, bool soft) {
  MutexLock l(&mu_);
  WaitAsyncLocked();
  return AppendLocked(kind, data, len, soft);
}

Status Journal::Read(std::vector<Record>* out) {
  MutexLock l(&mu_);
  WaitAsyncLocked();
  if (!open_) return Status::InvalidArgument("cache journal: not open");
  uint64_t tail = tail_;
  UB_RETURN_IF_ERROR(Scan(out));
  if (tail_ != tail)
    return Status::Corruption("cache journal: reads back " + std::to_string(tail_) +
                              " bytes of records, " + std::to_string(tail) + " were written");
  return Status::OK();
}

Status Journal::Truncate(size_t keep, const std::vector<uint8_t>* partial) {
  MutexLock l(&mu_);
  WaitAsyncLocked();
  if (!open_) return Status::InvalidArgument("cache journal: not open");
  if (keep >= placed_.size()) return Status::OK();
  std::vector<Record> all;
  if (partial) {
    uint64_t tail = tail_;
    UB_RETURN_IF_ERROR(Scan(&all));
    if (tail_ != tail || keep >= all.size())
      return Status::Corruption("cache journal changed under Truncate");
  }
  SetTailLocked(placed_[keep].pos);
  placed_.resize(keep);
  if (!partial) {
    // Durably end the journal here: a later scan must not find the dropped
    // records still chained on.
    AlignedBuffer zero(o_.block_size);
    std::memset(zero.data(), 0, o_.block_size);
    return io_({IoOp::kWrite, kIoFua, o_.offset + tail_, o_.block_size, zero.data()});
  }
  // The replacement takes the dropped record's index with a different csum,
  // so records after it never chain onto it.
  return AppendLocked(all[keep].kind, partial->data(), partial->size(), false);
}

bool Journal::open() const {
  MutexLock l(&mu_);
  return open_;
}

}  // namespace ubcache
