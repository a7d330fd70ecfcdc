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
//                                [u64 epoch, when flags bit 2 is set]
//            | u8 2 (invalidate) u16 shard, u32 dev, u64 start, u64 end
//            | u8 3 (keep)       u32 dev, u64 end, u32 len, u64 cache_offset, u8 gen, u64 epoch
//            | u8 4 (unkeep)     u32 dev, u64 epoch, u64 start
//            | u8 16 (backing flushed) u32 dev, u64 first_seq, u64 last_seq
//            | u8 17 (power domain)    u8[16] domain
//
// An insert op is one stripe-sized piece (it names its shard implicitly); an
// invalidate op names the shard whose tree it applies to. Insert flags: bit 0
// dirty, bit 1 checked — the op carries the XXH3-64 of the piece's data, so
// that replay of an entry that may have reached the media before its data
// (a soft commit, see ExtentIndex::Commit) can tell whether the data did;
// bit 2 epoch — a dirty piece's write epoch (btree/write_epoch.h; absent:
// 0, as in entries written before epochs);
// bit 7 provisional — a clean piece whose backing data may not yet be
// durable on the backing device (ordering rule 9, doc/design.md).
// keep: a dirty piece an insert of a later epoch replaced, kept (a "kept
// version", with its epoch) until writeback has written that epoch; unkeep:
// the kept version of (dev, epoch, start) is gone (written back, or its
// range overwritten on the backing device). Both name their shard
// implicitly, by (dev, start).
// A backing-flushed op says a backing flush of `dev` completed that covers
// every provisional insert of `dev` in entries first_seq..last_seq (op kinds
// 5..15 are left for other records). A power-domain op opens each run's
// journal and follows each checkpoint's trim: the entries from it to the
// next one were written in that power domain (util/power_domain.h), so a
// replay in the same domain keeps their provisional inserts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "btree/extent.h"
#include "util/power_domain.h"
#include "util/status.h"

namespace ubcache {

inline constexpr uint32_t kJournalMagic = 0x454a4255;  // "UBJE"
inline constexpr uint16_t kJournalVersion = 1;
inline constexpr size_t kJournalHeaderSize = 40;
inline constexpr size_t kJournalInsertOpSize = 27;
inline constexpr size_t kJournalCheckedInsertOpSize = 35;
inline constexpr size_t kJournalInvalidateOpSize = 23;
inline constexpr size_t kJournalKeepOpSize = 34;
inline constexpr size_t kJournalUnkeepOpSize = 21;
inline constexpr size_t kJournalBackingFlushedOpSize = 21;
inline constexpr size_t kJournalPowerDomainOpSize = 17;

struct JournalOp {
  enum class Type : uint8_t {
    kInsert = 1,
    kInvalidate = 2,
    kKeep = 3,
    kUnkeep = 4,
    kBackingFlushed = 16,
    kPowerDomain = 17
  };
  Type type = Type::kInsert;
  uint32_t shard = 0;  // kInvalidate only
  // kInsert, kKeep: the piece (with its epoch); kInvalidate: dev, start,
  // len; kUnkeep: dev, start, epoch; kBackingFlushed: dev.
  Extent extent;
  bool checked = false;    // kInsert: data_hash is the piece's data
  uint64_t data_hash = 0;  //   (XXH3-64 of its extent.len bytes)
  bool provisional = false;  // kInsert, clean only: see the top
  uint64_t first_seq = 0, last_seq = 0;  // kBackingFlushed: the entries it covers
  PowerDomain domain{};                  // kPowerDomain
};

// Append one encoded op to a pending payload; with `data_hash`, a checked
// insert.
void AppendInsertOp(std::vector<uint8_t>* payload, const Extent& e,
                    const uint64_t* data_hash = nullptr, bool provisional = false);
void AppendInvalidateOp(std::vector<uint8_t>* payload, uint32_t shard, uint32_t dev,
                        uint64_t start, uint64_t end);
void AppendBackingFlushedOp(std::vector<uint8_t>* payload, uint32_t dev, uint64_t first_seq,
                            uint64_t last_seq);
void AppendPowerDomainOp(std::vector<uint8_t>* payload, const PowerDomain& domain);
void AppendKeepOp(std::vector<uint8_t>* payload, const Extent& kept);
void AppendUnkeepOp(std::vector<uint8_t>* payload, uint32_t dev, uint64_t epoch, uint64_t start);

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
