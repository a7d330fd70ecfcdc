// SPDX-License-Identifier: Apache-2.0
#include "btree/journal_format.h"

#include <algorithm>

#include "util/endian.h"
#include "util/hash.h"

namespace ubcache {

namespace {
constexpr uint8_t kEpochFlag = 0x04;
constexpr uint8_t kProvisionalFlag = 0x80;

// An insert or keep op's extent, after its type byte: dev, end, len,
// cache offset, gen (doc/format.md).
void StoreExtent(uint8_t* b, const Extent& e) {
  StoreLE32(b + 1, e.dev);
  StoreLE64(b + 5, e.start + e.len);
  StoreLE32(b + 13, static_cast<uint32_t>(e.len));
  StoreLE64(b + 17, e.cache_offset);
  b[25] = e.gen;
}
}  // namespace

void AppendInsertOp(std::vector<uint8_t>* payload, const Extent& e, const uint64_t* data_hash,
                    bool provisional) {
  uint8_t b[kJournalCheckedInsertOpSize + 8];
  b[0] = static_cast<uint8_t>(JournalOp::Type::kInsert);
  StoreExtent(b, e);
  b[26] = (e.dirty ? 1 : 0) | (data_hash ? 2 : 0) | (e.epoch ? kEpochFlag : 0) |
         (provisional && !e.dirty ? kProvisionalFlag : 0);
  size_t n = kJournalInsertOpSize;
  if (data_hash) {
    StoreLE64(b + n, *data_hash);
    n += 8;
  }
  if (e.epoch) {
    StoreLE64(b + n, e.epoch);
    n += 8;
  }
  payload->insert(payload->end(), b, b + n);
}

void AppendKeepOp(std::vector<uint8_t>* payload, const Extent& e) {
  uint8_t b[kJournalKeepOpSize];
  b[0] = static_cast<uint8_t>(JournalOp::Type::kKeep);
  StoreExtent(b, e);
  StoreLE64(b + 26, e.epoch);
  payload->insert(payload->end(), b, b + sizeof(b));
}

void AppendUnkeepOp(std::vector<uint8_t>* payload, uint32_t dev, uint64_t epoch, uint64_t start) {
  uint8_t b[kJournalUnkeepOpSize];
  b[0] = static_cast<uint8_t>(JournalOp::Type::kUnkeep);
  StoreLE32(b + 1, dev);
  StoreLE64(b + 5, epoch);
  StoreLE64(b + 13, start);
  payload->insert(payload->end(), b, b + sizeof(b));
}

void AppendInvalidateOp(std::vector<uint8_t>* payload, uint32_t shard, uint32_t dev,
                        uint64_t start, uint64_t end) {
  uint8_t b[kJournalInvalidateOpSize];
  b[0] = static_cast<uint8_t>(JournalOp::Type::kInvalidate);
  StoreLE16(b + 1, static_cast<uint16_t>(shard));
  StoreLE32(b + 3, dev);
  StoreLE64(b + 7, start);
  StoreLE64(b + 15, end);
  payload->insert(payload->end(), b, b + sizeof(b));
}

void AppendBackingFlushedOp(std::vector<uint8_t>* payload, uint32_t dev, uint64_t first_seq,
                            uint64_t last_seq) {
  uint8_t b[kJournalBackingFlushedOpSize];
  b[0] = static_cast<uint8_t>(JournalOp::Type::kBackingFlushed);
  StoreLE32(b + 1, dev);
  StoreLE64(b + 5, first_seq);
  StoreLE64(b + 13, last_seq);
  payload->insert(payload->end(), b, b + sizeof(b));
}

void AppendPowerDomainOp(std::vector<uint8_t>* payload, const PowerDomain& domain) {
  payload->push_back(static_cast<uint8_t>(JournalOp::Type::kPowerDomain));
  payload->insert(payload->end(), domain.begin(), domain.end());
}

std::vector<uint8_t> EncodeJournalEntry(uint64_t seq, uint32_t nops,
                                        const std::vector<uint8_t>& payload, uint64_t set_id) {
  std::vector<uint8_t> out(kJournalHeaderSize + payload.size());
  uint8_t* h = out.data();
  StoreLE32(h + 8, kJournalMagic);
  StoreLE16(h + 12, kJournalVersion);
  StoreLE16(h + 14, 0);
  StoreLE64(h + 16, seq);
  StoreLE32(h + 24, static_cast<uint32_t>(payload.size()));
  StoreLE32(h + 28, nops);
  StoreLE64(h + 32, set_id);
  std::copy(payload.begin(), payload.end(), out.begin() + kJournalHeaderSize);
  StoreLE64(h, Hash64(h + 8, out.size() - 8));
  return out;
}

Status DecodeJournalEntry(const uint8_t* p, size_t avail, size_t* entry_len, uint64_t* seq,
                          std::vector<JournalOp>* ops, uint64_t set_id) {
  const char* err = nullptr;
  uint64_t payload_len = avail >= kJournalHeaderSize ? LoadLE32(p + 24) : 0;
  if (avail < kJournalHeaderSize) {
    err = "short header";
  } else if (LoadLE32(p + 8) != kJournalMagic) {
    err = "bad magic";
  } else if (LoadLE16(p + 12) != kJournalVersion || LoadLE16(p + 14) != 0) {
    err = "bad version";
  } else if (payload_len > avail - kJournalHeaderSize) {
    err = "bad length";
  } else if (LoadLE64(p) != Hash64(p + 8, kJournalHeaderSize - 8 + payload_len)) {
    err = "bad csum";
  } else if (LoadLE64(p + 32) != set_id) {
    err = "wrong set";
  }
  if (err) return Status::Corruption(std::string("journal: ") + err);

  uint32_t nops = LoadLE32(p + 28);
  ops->clear();
  const uint8_t* q = p + kJournalHeaderSize;
  const uint8_t* end = q + payload_len;
  while (q < end) {
    JournalOp op;
    op.type = static_cast<JournalOp::Type>(q[0]);
    if (op.type == JournalOp::Type::kInsert && end - q >= (ptrdiff_t)kJournalInsertOpSize) {
      Extent& e = op.extent;
      e.dev = LoadLE32(q + 1);
      uint64_t ext_end = LoadLE64(q + 5);
      e.len = LoadLE32(q + 13);
      e.cache_offset = LoadLE64(q + 17);
      e.gen = q[25];
      e.dirty = (q[26] & 1) != 0;
      op.checked = (q[26] & 2) != 0;
      op.provisional = (q[26] & kProvisionalFlag) != 0;
      const bool has_epoch = (q[26] & kEpochFlag) != 0;
      if (e.len == 0 || e.len % kIndexBlock || ext_end % kIndexBlock || ext_end < e.len ||
          (q[26] & ~(3 | kEpochFlag | kProvisionalFlag)) || (op.provisional && e.dirty)) {
        return Status::Corruption("journal: bad extent");
      }
      e.start = ext_end - e.len;
      const ptrdiff_t size = kJournalInsertOpSize + (op.checked ? 8 : 0) + (has_epoch ? 8 : 0);
      if (end - q < size) return Status::Corruption("journal: bad op");
      if (op.checked) op.data_hash = LoadLE64(q + kJournalInsertOpSize);
      if (has_epoch) e.epoch = LoadLE64(q + size - 8);
      q += size;
    } else if (op.type == JournalOp::Type::kKeep && end - q >= (ptrdiff_t)kJournalKeepOpSize) {
      Extent& e = op.extent;
      e.dev = LoadLE32(q + 1);
      uint64_t ext_end = LoadLE64(q + 5);
      e.len = LoadLE32(q + 13);
      e.cache_offset = LoadLE64(q + 17);
      e.gen = q[25];
      e.dirty = true;
      e.epoch = LoadLE64(q + 26);
      if (e.len == 0 || e.len % kIndexBlock || ext_end % kIndexBlock || ext_end < e.len)
        return Status::Corruption("journal: bad extent");
      e.start = ext_end - e.len;
      q += kJournalKeepOpSize;
    } else if (op.type == JournalOp::Type::kUnkeep && end - q >= (ptrdiff_t)kJournalUnkeepOpSize) {
      op.extent.dev = LoadLE32(q + 1);
      op.extent.epoch = LoadLE64(q + 5);
      op.extent.start = LoadLE64(q + 13);
      op.extent.len = kIndexBlock;  // unused; keeps range checks of the op happy
      if (op.extent.start % kIndexBlock) return Status::Corruption("journal: bad extent");
      q += kJournalUnkeepOpSize;
    } else if (op.type == JournalOp::Type::kInvalidate &&
               end - q >= (ptrdiff_t)kJournalInvalidateOpSize) {
      op.shard = LoadLE16(q + 1);
      op.extent.dev = LoadLE32(q + 3);
      uint64_t s = LoadLE64(q + 7), e = LoadLE64(q + 15);
      if (e <= s || s % kIndexBlock || e % kIndexBlock) {
        return Status::Corruption("journal: bad extent");
      }
      op.extent.start = s;
      op.extent.len = e - s;
      q += kJournalInvalidateOpSize;
    } else if (op.type == JournalOp::Type::kBackingFlushed &&
               end - q >= (ptrdiff_t)kJournalBackingFlushedOpSize) {
      op.extent.dev = LoadLE32(q + 1);
      op.first_seq = LoadLE64(q + 5);
      op.last_seq = LoadLE64(q + 13);
      if (op.last_seq < op.first_seq) return Status::Corruption("journal: bad op");
      q += kJournalBackingFlushedOpSize;
    } else if (op.type == JournalOp::Type::kPowerDomain &&
               end - q >= (ptrdiff_t)kJournalPowerDomainOpSize) {
      std::copy(q + 1, q + kJournalPowerDomainOpSize, op.domain.begin());
      q += kJournalPowerDomainOpSize;
    } else {
      return Status::Corruption("journal: bad op");
    }
    ops->push_back(op);
  }
  if (ops->size() != nops) return Status::Corruption("journal: bad op count");
  *entry_len = kJournalHeaderSize + payload_len;
  *seq = LoadLE64(p + 16);
  return Status::OK();
}

}  // namespace ubcache
