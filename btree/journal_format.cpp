// SPDX-License-Identifier: Apache-2.0
#include "btree/journal_format.h"

#include "util/endian.h"
#include "util/hash.h"

namespace ubcache {

void AppendInsertOp(std::vector<uint8_t>* payload, const Extent& e, const uint64_t* data_hash) {
  uint8_t b[kJournalCheckedInsertOpSize];
  b[0] = static_cast<uint8_t>(JournalOp::Type::kInsert);
  StoreLE32(b + 1, e.dev);
  StoreLE64(b + 5, e.start + e.len);
  StoreLE32(b + 13, static_cast<uint32_t>(e.len));
  StoreLE64(b + 17, e.cache_offset);
  b[25] = e.gen;
  b[26] = (e.dirty ? 1 : 0) | (data_hash ? 2 : 0);
  if (data_hash) StoreLE64(b + 27, *data_hash);
  payload->insert(payload->end(), b, b + (data_hash ? kJournalCheckedInsertOpSize : kJournalInsertOpSize));
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
      if (e.len == 0 || e.len % kIndexBlock || ext_end % kIndexBlock || ext_end < e.len ||
          (q[26] & ~3)) {
        return Status::Corruption("journal: bad extent");
      }
      e.start = ext_end - e.len;
      if (op.checked) {
        if (end - q < (ptrdiff_t)kJournalCheckedInsertOpSize) return Status::Corruption("journal: bad op");
        op.data_hash = LoadLE64(q + 27);
        q += kJournalCheckedInsertOpSize;
      } else {
        q += kJournalInsertOpSize;
      }
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
