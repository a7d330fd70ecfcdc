// SPDX-License-Identifier: Apache-2.0
// On-disk journal entry: one per Commit(), explicit little-endian, checksummed,
// sequence-numbered. Replay stops at the first entry that fails any check:
// that is the torn tail of a crash, and nothing past it is applied. Grammar in
// doc/format.md ("journal"); in short:
//
//   entry   := header payload
//   header  (40 bytes)
//      0  u64 csum         XXH3-64 of bytes [8, 40 + payload_len)
//      8  u32 magic        "UBJE" (0x454a4255)
//     12  u16 version      1
//     14  u16 reserved     0
//     16  u64 seq          previous entry's seq + 1
//     24  u32 payload_len
//     28  u32 nops
//     32  u64 set_id       the cache set: entries of an earlier format end replay
//   payload := op{nops}
//   op      := u8 1 (insert)     u32 dev, u64 end, u32 len, u64 cache_offset, u8 gen, u8 flags
//                                [u64 data_hash, when flags bit 1 is set]
//            | u8 2 (invalidate) u16 shard, u32 dev, u64 start, u64 end
//
// An insert op is one stripe-sized piece (it names its shard implicitly); an
// invalidate op names the shard whose tree it applies to. Insert flags: bit 0
// dirty, bit 1 checked — the op carries the XXH3-64 of the piece's data, so
// that replay of an entry that may have reached the media before its data
// (a soft commit, see ExtentIndex::Commit) can tell whether the data did.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "btree/extent.h"
#include "util/status.h"

namespace ubcache {

inline constexpr uint32_t kJournalMagic = 0x454a4255;  // "UBJE"
inline constexpr uint16_t kJournalVersion = 1;
inline constexpr size_t kJournalHeaderSize = 40;
inline constexpr size_t kJournalInsertOpSize = 27;
inline constexpr size_t kJournalCheckedInsertOpSize = 35;
inline constexpr size_t kJournalInvalidateOpSize = 23;

struct JournalOp {
  enum class Type : uint8_t { kInsert = 1, kInvalidate = 2 };
  Type type = Type::kInsert;
  uint32_t shard = 0;  // kInvalidate only
  Extent extent;       // kInsert: the piece; kInvalidate: dev, start, len
  bool checked = false;    // kInsert: data_hash is the piece's data
  uint64_t data_hash = 0;  //   (XXH3-64 of its extent.len bytes)
};

// Append one encoded op to a pending payload; with `data_hash`, a checked
// insert.
void AppendInsertOp(std::vector<uint8_t>* payload, const Extent& e,
                    const uint64_t* data_hash = nullptr);
void AppendInvalidateOp(std::vector<uint8_t>* payload, uint32_t shard, uint32_t dev,
                        uint64_t start, uint64_t end);

// Header + payload, ready for NodeStore::AppendJournal.
std::vector<uint8_t> EncodeJournalEntry(uint64_t seq, uint32_t nops,
                                        const std::vector<uint8_t>& payload, uint64_t set_id = 0);

// Decodes the entry at p (avail bytes left in the journal). On success sets
// *entry_len (bytes consumed), *seq and *ops. Errors name the first failed
// check: "journal: short header", "bad magic", "bad version", "bad length",
// "bad csum", "wrong set", "bad op", "bad extent", "bad op count".
Status DecodeJournalEntry(const uint8_t* p, size_t avail, size_t* entry_len, uint64_t* seq,
                          std::vector<JournalOp>* ops, uint64_t set_id = 0);

}  // namespace ubcache
