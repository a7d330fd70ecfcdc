// SPDX-License-Identifier: Apache-2.0
// Superblocks: the one block that says what a cache or backing device is.
//
// Both kinds live in one 4096-byte block at byte offset 4096 (sector 8):
//  - CacheSuperblock: ubcache's own little-endian layout, checksummed with
//    XXH3-64. Describes the cache set: geometry (block, bucket, journal
//    buckets), identity (uuid, set uuid, label), feature flags, and the btree
//    root that the index writes.
//  - BackingSuperblock: Linux bcache's `struct cache_sb_disk` for a backing
//    device (version 1, or 4 with data_offset), checksummed with bcache's
//    crc64, byte-compatible both ways with bcache-tools: `bcache-super-show`
//    reads what we write, and we read what `make-bcache -B` writes.
// doc/format.md is the byte-level reference; change it together with this.
//
// The structs below hold decoded values in natural units; only the Encode*
// and Decode* functions know the byte layout (nothing is memcpy'd). Decode*
// validates in one cascade and returns the first failed check as
// Status::Corruption("superblock: bad csum ..."), or Status::NotFound when no
// superblock magic is there at all, so callers can tell a blank device from
// a damaged one.
//
// Thread safety: the structs are values and the codec functions are pure.
// Read*/Write*/Probe do synchronous I/O on the calling thread's Reactor
// (backend/sync_io.h): for tools and attach-time code, never on a reactor
// that serves clients.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/block_device.h"
#include "cache/knobs.h"  // CacheMode, with bcache's numbers (BDEV_CACHE_MODE)
#include "util/status.h"

namespace ubcache {

inline constexpr uint64_t kSuperblockOffset = 4096;  // bytes; sector 8, as bcache
inline constexpr size_t kSuperblockSize = 4096;
inline constexpr uint64_t kSectorSize = 512;
inline constexpr size_t kLabelSize = 32;  // on disk, NUL-padded

using SuperblockBlock = std::span<uint8_t, kSuperblockSize>;
using ConstSuperblockBlock = std::span<const uint8_t, kSuperblockSize>;

using Uuid = std::array<uint8_t, 16>;
// "8-4-4-4-12" lowercase hex of the bytes in order, as libuuid prints them.
std::string FormatUuid(const Uuid& u);
std::optional<Uuid> ParseUuid(std::string_view text);
bool IsZeroUuid(const Uuid& u);
// A random (version 4) UUID from getrandom(2).
Result<Uuid> RandomUuid();

// bcache's backing-device states (BDEV_STATE). kNone means detached.
enum class BackingState : uint8_t { kNone = 0, kClean = 1, kDirty = 2, kStale = 3 };
const char* BackingStateName(BackingState s);

// ---------------------------------------------------------------------------
// The cache device's superblock (ubcache format).

struct CacheSuperblock {
  static constexpr uint32_t kVersion = 1;
  // Magic: 0x89 "UBCACHE" CR LF SUB LF, then 4 fixed random bytes. The high
  // byte and line endings catch text-mode mangling, as PNG's signature does.
  static constexpr std::array<uint8_t, 16> kMagic = {0x89, 'U',  'B',  'C',  'A',  'C',
                                                     'H',  'E',  0x0d, 0x0a, 0x1a, 0x0a,
                                                     0x5c, 0x3e, 0xa1, 0x77};
  // `flags` bits.
  static constexpr uint64_t kFlagClean = 1u << 0;  // shut down cleanly: journal fully applied
  // feature_incompat bit 0: the superblock carries the index root record
  // and the bucket table pointer (warm restart state, doc/format.md §2). An
  // incompat bit: a build that does not know it would serve the cache cold
  // without clearing `clean`, and a later warm start would then trust an
  // index whose buckets it had overwritten.
  static constexpr uint64_t kIncompatWarmState = 1u << 0;
  // feature_incompat bit 1: backing devices are fenced (`fences` below), set
  // only while the list is not empty. Incompat because a build that does
  // not know it would write the fenced devices' dirty data back over what
  // their new owner wrote.
  static constexpr uint64_t kIncompatFences = 1u << 1;
  // Feature bits this build understands. An unknown incompat bit
  // refuses the device; an unknown ro_compat bit allows read-only use; an
  // unknown compat bit is ignored. See doc/format.md, "Versioning".
  static constexpr uint64_t kKnownCompat = 0;
  static constexpr uint64_t kKnownRoCompat = 0;
  static constexpr uint64_t kKnownIncompat = kIncompatWarmState | kIncompatFences;
  // The index root record lives at this offset of the block, at most this long.
  static constexpr size_t kIndexRootOffset = 512;
  static constexpr size_t kMaxIndexRoot = 4096 - kIndexRootOffset;

  // Fence records live at 224, 24 bytes each, up to the root record.
  static constexpr size_t kFencesOffset = 224;
  static constexpr size_t kFenceSize = 24;
  static constexpr size_t kMaxFences = (kIndexRootOffset - kFencesOffset) / kFenceSize;

  static constexpr uint32_t kMinBlockSize = 512;
  static constexpr uint32_t kMaxBlockSize = 64 * 1024;
  static constexpr uint64_t kMinBucketSize = 4096;
  static constexpr uint64_t kMaxBucketSize = 1ull << 30;
  static constexpr uint64_t kDefaultBucketSize = 512 * 1024;
  // Buckets below this byte offset belong to the superblock area.
  static constexpr uint64_t kReservedBytes = 1 << 20;
  static constexpr uint64_t kMinDataBuckets = 8;
  static constexpr uint32_t kMaxBtreeLevel = 15;

  uint32_t version = kVersion;
  Uuid uuid{};
  Uuid set_uuid{};
  std::string label;  // at most kLabelSize bytes, no NUL
  uint64_t feature_compat = 0;
  uint64_t feature_ro_compat = 0;
  uint64_t feature_incompat = 0;
  uint64_t flags = 0;
  uint64_t seq = 0;          // bumped by every superblock write
  uint64_t created = 0;      // unix seconds at format time
  uint32_t block_size = 4096;  // bytes; the smallest unit of cache I/O
  CacheMode cache_mode = CacheMode::kWritethrough;  // default for attached backing devices
  uint64_t bucket_size = kDefaultBucketSize;        // bytes
  uint64_t nbuckets = 0;         // buckets on the device, counting from byte 0
  uint64_t first_bucket = 0;     // first bucket past the superblock area
  uint64_t journal_buckets = 0;  // [first_bucket, first_bucket + journal_buckets)
  // Btree root, written by the index. btree_root_bucket 0 means "no root yet"
  // (bucket 0 always holds the superblock, so it can never be a node).
  uint64_t btree_root_bucket = 0;
  uint32_t btree_root_offset = 0;  // bytes into the bucket
  uint8_t btree_root_level = 0;    // 0 = the root is a leaf
  // With kIncompatWarmState (zero/empty otherwise):
  std::vector<uint8_t> index_root;   // IndexRoot::Encode(); empty: none yet
  uint64_t bucket_table_offset = 0;  // bytes on the device, in the journal area
  uint64_t bucket_table_len = 0;     // bytes; 0: no table
  // A backing device that lost its ownership (rbd: another client took the
  // image over) while this cache served it: its cached data, dirty data
  // included, may be older than what the new owner wrote, and is neither
  // served nor written back until an operator decides (serve --after-fence).
  struct Fence {
    Uuid backing{};
    uint64_t since = 0;  // unix seconds
    bool operator==(const Fence&) const = default;
  };
  std::vector<Fence> fences;  // with kIncompatFences, at most kMaxFences
  uint64_t csum = 0;  // as read by Decode; Encode computes its own

  // Buckets for btree nodes and cached data: [data_bucket(), nbuckets).
  uint64_t data_bucket() const { return first_bucket + journal_buckets; }
  uint64_t bucket_offset(uint64_t bucket) const { return bucket * bucket_size; }
  bool clean() const { return flags & kFlagClean; }
  bool has_btree_root() const { return btree_root_bucket != 0; }
  bool has_warm_state() const { return feature_incompat & kIncompatWarmState; }
  bool has_fences() const { return feature_incompat & kIncompatFences; }
  // False when a ro_compat feature unknown to this build is set.
  bool writable_by_this_build() const { return (feature_ro_compat & ~kKnownRoCompat) == 0; }
};

// Encodes `sb` (and its checksum) into `block`; every byte is written.
void EncodeCacheSuperblock(const CacheSuperblock& sb, SuperblockBlock block);
// Decodes and validates. `device_size` (bytes; 0 = unknown, skip the check)
// and `device_block_size` bound the geometry.
Result<CacheSuperblock> DecodeCacheSuperblock(ConstSuperblockBlock block, uint64_t device_size = 0,
                                              uint32_t device_block_size = 512);
// The field checks of the cascade alone (what Decode runs after magic,
// version and checksum); format uses it on a superblock it is about to write.
Status ValidateCacheSuperblock(const CacheSuperblock& sb, uint64_t device_size,
                               uint32_t device_block_size);

struct CacheFormatOptions {
  uint32_t block_size = 4096;
  uint64_t bucket_size = CacheSuperblock::kDefaultBucketSize;
  uint64_t journal_buckets = 0;  // 0: about 1% of the buckets, 8 to 256
  std::string label;
  CacheMode cache_mode = CacheMode::kWritethrough;
};
// A new cache set laid out on a device of `device_size` bytes: fresh uuids,
// clean, seq 1, no btree root. The error says which parameter does not fit.
Result<CacheSuperblock> NewCacheSuperblock(const CacheFormatOptions& opts, uint64_t device_size,
                                           uint32_t device_block_size);
// The journal bucket count NewCacheSuperblock picks for `nbuckets` when
// asked for 0: ~1% of the buckets, at least 8 and at most 256, and never
// more than a quarter of the device.
uint64_t DefaultJournalBuckets(uint64_t nbuckets);

// ---------------------------------------------------------------------------
// The backing device's superblock (Linux bcache layout).

struct BackingSuperblock {
  static constexpr uint64_t kVersionBdev = 1;            // data at sector 16
  static constexpr uint64_t kVersionBdevWithOffset = 4;  // data at data_offset
  static constexpr uint64_t kSbSector = 8;
  static constexpr uint64_t kDefaultDataOffset = 16;  // sectors (BDEV_DATA_START_DEFAULT)
  static constexpr std::array<uint8_t, 16> kMagic = {0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a,
                                                     0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f,
                                                     0x48, 0xba, 0x6d, 0x81};
  static constexpr unsigned kJournalBuckets = 256;  // SB_JOURNAL_BUCKETS: the d[] array

  uint64_t version = kVersionBdevWithOffset;
  Uuid uuid{};
  Uuid set_uuid{};  // the cache set it is attached to; zero when detached
  std::string label;  // at most kLabelSize bytes, no NUL
  CacheMode cache_mode = CacheMode::kWritethrough;  // flags bits 0-3
  BackingState state = BackingState::kNone;         // flags bits 61-62
  uint64_t other_flags = 0;  // flags bits we do not interpret, kept as read
  uint64_t seq = 0;
  uint64_t data_offset = kDefaultDataOffset;  // sectors: the first client byte
  uint16_t block_size = 8;    // sectors
  uint16_t bucket_size = 0;   // sectors; unused for backing devices (make-bcache writes 1024)
  uint32_t last_mount = 0;    // unix seconds
  // Unix seconds when the state last became dirty (BackingSuper::MarkDirty):
  // the device held every write up to then; what came after may be in part
  // only in the cache. 0: unknown (not dirty, or written before the field).
  // In bcache's pad, which the kernel and bcache-tools neither read nor keep.
  uint64_t dirty_since = 0;
  // ubcache's writeback_order knob, persisted beside cache_mode (pad byte
  // 152; 0 = flush, the default, also for superblocks written before it).
  WritebackOrder writeback_order = WritebackOrder::kFlush;
  // Unix seconds T, while dirty and written back in `flush` order: the
  // device holds every write acknowledged before T, and of the later ones
  // only what a power cut at some moment at or after T could have left
  // (doc/design.md rules 11-14, 16). Written by the writeback thread at most
  // once a second, only after the backing flush that made it true
  // (BackingSuper::RecordConsistentAsOf). 0: no such promise — not dirty,
  // `lba` order (or dirty data written back in it since), or a superblock
  // written before the field. In pad[5], inside the checksum.
  uint64_t consistent_as_of = 0;
  uint64_t csum = 0;          // as read by Decode; Encode computes its own

  uint64_t data_offset_bytes() const { return data_offset * kSectorSize; }
  uint32_t block_size_bytes() const { return uint32_t{block_size} * kSectorSize; }
};

// Encodes into `block` (all 4096 bytes; the tail past the bcache struct is
// zero). Version 1 has no data_offset field: `data_offset` must then be 16.
void EncodeBackingSuperblock(const BackingSuperblock& sb, SuperblockBlock block);
Result<BackingSuperblock> DecodeBackingSuperblock(ConstSuperblockBlock block,
                                                  uint64_t device_size = 0,
                                                  uint32_t device_block_size = 512);
Status ValidateBackingSuperblock(const BackingSuperblock& sb, uint64_t device_size,
                                 uint32_t device_block_size);

struct BackingFormatOptions {
  uint64_t data_offset = 8192;  // bytes; multiple of 4 KiB, at least 8 KiB
  std::string label;
  CacheMode cache_mode = CacheMode::kWritethrough;
  // Zero: detached (state none). Otherwise attached to that cache set, clean.
  Uuid set_uuid{};
};
Result<BackingSuperblock> NewBackingSuperblock(const BackingFormatOptions& opts,
                                               uint64_t device_size, uint32_t device_block_size);

// bcache's checksum, bch_crc64: CRC-64 with the ECMA-182 polynomial, MSB
// first (the kernel's crc64_be), initial value and final xor all ones.
uint64_t BcacheCrc64(const void* data, size_t len);

// ---------------------------------------------------------------------------
// Device helpers.

enum class SuperblockKind { kNone, kCache, kBacking, kBcacheCache };
const char* SuperblockKindName(SuperblockKind k);

// What the magic at 4 KiB says, without validating the rest. A magic that is
// nearly ours or bcache's gives Corruption "superblock: bad magic": a damaged
// superblock is not a blank device.
Result<SuperblockKind> Probe(BlockDevice& dev);

Result<CacheSuperblock> ReadCacheSuperblock(BlockDevice& dev);
Result<BackingSuperblock> ReadBackingSuperblock(BlockDevice& dev);
// Flush, write the block, flush: durable on return, and never durable before
// the writes issued earlier (journal, btree nodes) that it points at. The
// caller bumps `seq`.
Status WriteCacheSuperblock(BlockDevice& dev, const CacheSuperblock& sb);
Status WriteBackingSuperblock(BlockDevice& dev, const BackingSuperblock& sb);

}  // namespace ubcache
