// SPDX-License-Identifier: Apache-2.0
#include "cache/superblock.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "backend/sync_io.h"
#include "util/aligned_buffer.h"
#include "util/endian.h"
#include "util/hash.h"
#include "util/size.h"

namespace ubcache {

namespace {

// Byte offsets in the cache superblock block (doc/format.md, "Cache superblock").
namespace cache_off {
constexpr size_t kMagic = 0;
constexpr size_t kCsum = 16;
constexpr size_t kVersion = 24;
constexpr size_t kBlockSize = 28;
constexpr size_t kUuid = 32;
constexpr size_t kSetUuid = 48;
constexpr size_t kLabel = 64;
constexpr size_t kFeatureCompat = 96;
constexpr size_t kFeatureRoCompat = 104;
constexpr size_t kFeatureIncompat = 112;
constexpr size_t kFlags = 120;
constexpr size_t kSeq = 128;
constexpr size_t kCreated = 136;
constexpr size_t kBucketSize = 144;
constexpr size_t kNbuckets = 152;
constexpr size_t kFirstBucket = 160;
constexpr size_t kJournalBuckets = 168;
constexpr size_t kBtreeRootBucket = 176;
constexpr size_t kBtreeRootOffset = 184;
constexpr size_t kBtreeRootLevel = 188;
constexpr size_t kCacheMode = 189;
constexpr size_t kIndexRootLen = 192;  // with kIncompatWarmState
constexpr size_t kBucketTableOffset = 200;
constexpr size_t kBucketTableLen = 208;
constexpr size_t kFenceCount = 216;  // with kIncompatFences; the records at kFencesOffset
constexpr size_t kEnd = 220;  // reserved (zero) from here to 4096, but for the fences and the root record
}  // namespace cache_off

// Byte offsets in bcache's struct cache_sb_disk (include/uapi/linux/bcache.h,
// now drivers/md/bcache/bcache_ondisk.h). Only the backing-device view.
namespace bch_off {
constexpr size_t kCsum = 0;
constexpr size_t kOffset = 8;
constexpr size_t kVersion = 16;
constexpr size_t kMagic = 24;
constexpr size_t kUuid = 40;
constexpr size_t kSetUuid = 56;
constexpr size_t kLabel = 72;
constexpr size_t kFlags = 104;
constexpr size_t kSeq = 112;
// 120..183: pad[8] (newer kernels: feature_compat/incompat/ro_compat, pad[5])
constexpr size_t kDirtySince = 144;  // ubcache's, in pad[3]: see BackingSuperblock
constexpr size_t kWritebackOrder = 152;  // ubcache's, u8 in pad[4]
constexpr size_t kConsistentAsOf = 160;  // ubcache's, in pad[5]: see BackingSuperblock
constexpr size_t kDataOffset = 184;  // nbuckets for cache devices
constexpr size_t kBlockSize = 192;
constexpr size_t kBucketSize = 194;
// 196: nr_in_set, 198: nr_this_dev (cache devices)
constexpr size_t kLastMount = 200;
// 204: first_bucket (cache devices)
constexpr size_t kKeys = 206;
constexpr size_t kD = 208;  // u64 d[256]: journal buckets (cache devices)
}  // namespace bch_off

// CacheMode's numbers are on disk in both superblocks (bcache's BDEV_CACHE_MODE).
static_assert(static_cast<int>(CacheMode::kWritethrough) == 0 &&
              static_cast<int>(CacheMode::kWriteback) == 1 &&
              static_cast<int>(CacheMode::kWritearound) == 2 &&
              static_cast<int>(CacheMode::kNone) == 3);

// bcache versions that mean "cache device": CDEV, CDEV_WITH_UUID, CDEV_WITH_FEATURES.
bool IsBcacheCacheVersion(uint64_t v) { return v == 0 || v == 3 || v == 5; }

constexpr uint64_t kCacheModeMask = 0xf;  // BDEV_CACHE_MODE: bits 0-3
constexpr unsigned kStateShift = 61;      // BDEV_STATE: bits 61-62
constexpr uint64_t kStateMask = 3ull << kStateShift;

Status Corrupt(const std::string& what) { return Status::Corruption("superblock: " + what); }

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// A magic that differs from `want` in at most two of its 16 bytes is a
// damaged superblock, not a blank or foreign block: the chance that unrelated
// data comes that close is about 2^-110.
bool NearlyMatches(const uint8_t* p, const std::array<uint8_t, 16>& want) {
  int diff = 0;
  for (size_t i = 0; i < want.size(); i++) diff += p[i] != want[i];
  return diff > 0 && diff <= 2;
}
bool Matches(const uint8_t* p, const std::array<uint8_t, 16>& want) {
  return std::memcmp(p, want.data(), want.size()) == 0;
}

void PutLabel(uint8_t* p, const std::string& label) {
  std::memset(p, 0, kLabelSize);
  std::memcpy(p, label.data(), std::min(label.size(), kLabelSize));
}
std::string GetLabel(const uint8_t* p) {
  size_t n = 0;
  while (n < kLabelSize && p[n] != 0) n++;
  return std::string(reinterpret_cast<const char*>(p), n);
}
Uuid GetUuid(const uint8_t* p) {
  Uuid u;
  std::copy(p, p + 16, u.begin());
  return u;
}

uint64_t CacheChecksum(ConstSuperblockBlock block) {
  // XXH3-64 of the whole block with the checksum field read as zero.
  std::array<uint8_t, kSuperblockSize> copy;
  std::memcpy(copy.data(), block.data(), kSuperblockSize);
  std::memset(copy.data() + cache_off::kCsum, 0, 8);
  return Hash64(copy.data(), copy.size());
}

// bcache's csum_set(): from the `offset` field to the end of d[keys].
uint64_t BackingChecksum(ConstSuperblockBlock block, uint16_t keys) {
  size_t end = bch_off::kD + size_t{keys} * 8;
  return BcacheCrc64(block.data() + bch_off::kOffset, end - bch_off::kOffset);
}

Status CheckLabel(const std::string& label) {
  if (label.size() > kLabelSize) return Corrupt("label longer than 32 bytes");
  if (label.find('\0') != std::string::npos) return Corrupt("label contains a NUL byte");
  return Status::OK();
}

}  // namespace

// --- UUIDs and names --------------------------------------------------------

std::string FormatUuid(const Uuid& u) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < u.size(); i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += kHex[u[i] >> 4];
    s += kHex[u[i] & 15];
  }
  return s;
}

std::optional<Uuid> ParseUuid(std::string_view text) {
  Uuid u{};
  size_t n = 0;
  int nibble = -1;
  for (size_t i = 0; i < text.size(); i++) {
    char c = text[i];
    if (c == '-' && (i == 8 || i == 13 || i == 18 || i == 23)) continue;
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else return std::nullopt;
    if (n >= 16) return std::nullopt;
    if (nibble < 0) {
      nibble = v;
    } else {
      u[n++] = static_cast<uint8_t>(nibble << 4 | v);
      nibble = -1;
    }
  }
  if (n != 16 || nibble >= 0 || text.size() != 36) return std::nullopt;
  return u;
}

bool IsZeroUuid(const Uuid& u) {
  return std::all_of(u.begin(), u.end(), [](uint8_t b) { return b == 0; });
}

Result<Uuid> RandomUuid() {
  Uuid u;
  size_t got = 0;
  while (got < u.size()) {
    ssize_t n = getrandom(u.data() + got, u.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "getrandom");
    }
    got += static_cast<size_t>(n);
  }
  u[6] = static_cast<uint8_t>((u[6] & 0x0f) | 0x40);  // version 4
  u[8] = static_cast<uint8_t>((u[8] & 0x3f) | 0x80);  // RFC 4122 variant
  return u;
}

const char* BackingStateName(BackingState s) {
  switch (s) {
    case BackingState::kNone: return "none";
    case BackingState::kClean: return "clean";
    case BackingState::kDirty: return "dirty";
    case BackingState::kStale: return "stale";
  }
  return "unknown";
}

const char* SuperblockKindName(SuperblockKind k) {
  switch (k) {
    case SuperblockKind::kNone: return "none";
    case SuperblockKind::kCache: return "ubcache cache";
    case SuperblockKind::kBacking: return "bcache backing";
    case SuperblockKind::kBcacheCache: return "bcache cache";
  }
  return "unknown";
}

// --- bcache crc64 -----------------------------------------------------------

namespace {

struct Crc64Table {
  uint64_t t[256];
  constexpr Crc64Table() : t() {
    constexpr uint64_t kPoly = 0x42f0e1eba9ea3693ull;  // ECMA-182
    for (unsigned i = 0; i < 256; i++) {
      uint64_t crc = uint64_t{i} << 56;
      for (int b = 0; b < 8; b++) crc = (crc & (1ull << 63)) ? (crc << 1) ^ kPoly : crc << 1;
      t[i] = crc;
    }
  }
};
constexpr Crc64Table kCrc64;

}  // namespace

uint64_t BcacheCrc64(const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t crc = ~0ull;
  for (size_t i = 0; i < len; i++) crc = kCrc64.t[((crc >> 56) ^ p[i]) & 0xff] ^ (crc << 8);
  return crc ^ ~0ull;
}

// --- cache superblock -------------------------------------------------------

void EncodeCacheSuperblock(const CacheSuperblock& sb, SuperblockBlock b) {
  using namespace cache_off;
  uint8_t* p = b.data();
  std::memset(p, 0, kSuperblockSize);
  std::memcpy(p + kMagic, CacheSuperblock::kMagic.data(), 16);
  StoreLE32(p + kVersion, sb.version);
  StoreLE32(p + kBlockSize, sb.block_size);
  std::memcpy(p + kUuid, sb.uuid.data(), 16);
  std::memcpy(p + kSetUuid, sb.set_uuid.data(), 16);
  PutLabel(p + kLabel, sb.label);
  StoreLE64(p + kFeatureCompat, sb.feature_compat);
  StoreLE64(p + kFeatureRoCompat, sb.feature_ro_compat);
  StoreLE64(p + kFeatureIncompat, sb.feature_incompat);
  StoreLE64(p + kFlags, sb.flags);
  StoreLE64(p + kSeq, sb.seq);
  StoreLE64(p + kCreated, sb.created);
  StoreLE64(p + kBucketSize, sb.bucket_size);
  StoreLE64(p + kNbuckets, sb.nbuckets);
  StoreLE64(p + kFirstBucket, sb.first_bucket);
  StoreLE64(p + kJournalBuckets, sb.journal_buckets);
  StoreLE64(p + kBtreeRootBucket, sb.btree_root_bucket);
  StoreLE32(p + kBtreeRootOffset, sb.btree_root_offset);
  p[kBtreeRootLevel] = sb.btree_root_level;
  p[kCacheMode] = static_cast<uint8_t>(sb.cache_mode);
  if (sb.has_warm_state()) {
    size_t n = std::min(sb.index_root.size(), CacheSuperblock::kMaxIndexRoot);
    StoreLE32(p + kIndexRootLen, static_cast<uint32_t>(n));
    StoreLE64(p + kBucketTableOffset, sb.bucket_table_offset);
    StoreLE64(p + kBucketTableLen, sb.bucket_table_len);
    if (n) std::memcpy(p + CacheSuperblock::kIndexRootOffset, sb.index_root.data(), n);
  }
  if (sb.has_fences()) {
    size_t n = std::min(sb.fences.size(), CacheSuperblock::kMaxFences);
    StoreLE32(p + kFenceCount, static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; i++) {
      uint8_t* f = p + CacheSuperblock::kFencesOffset + i * CacheSuperblock::kFenceSize;
      std::memcpy(f, sb.fences[i].backing.data(), 16);
      StoreLE64(f + 16, sb.fences[i].since);
    }
  }
  static_assert(kEnd <= CacheSuperblock::kFencesOffset);
  static_assert(CacheSuperblock::kFencesOffset + CacheSuperblock::kMaxFences * CacheSuperblock::kFenceSize <=
                CacheSuperblock::kIndexRootOffset);
  StoreLE64(p + kCsum, CacheChecksum(b));
}

Status ValidateCacheSuperblock(const CacheSuperblock& sb, uint64_t device_size,
                               uint32_t device_block_size) {
  using S = CacheSuperblock;
  if (uint64_t unknown = sb.feature_incompat & ~S::kKnownIncompat)
    return Status::NotSupported("superblock: unsupported incompat features " + Hex(unknown));
  if (IsZeroUuid(sb.uuid)) return Corrupt("uuid is zero");
  if (IsZeroUuid(sb.set_uuid)) return Corrupt("set uuid is zero");
  UB_RETURN_IF_ERROR(CheckLabel(sb.label));
  if (!IsPowerOfTwo(sb.block_size))
    return Corrupt("block size not a power of two (" + std::to_string(sb.block_size) + ")");
  if (sb.block_size < S::kMinBlockSize || sb.block_size > S::kMaxBlockSize)
    return Corrupt("block size out of range (" + std::to_string(sb.block_size) +
                   "; 512 to 65536)");
  if (sb.block_size < device_block_size)
    return Corrupt("block size smaller than the device's logical block size (" +
                   std::to_string(sb.block_size) + " < " + std::to_string(device_block_size) + ")");
  if (!IsPowerOfTwo(sb.bucket_size))
    return Corrupt("bucket size not a power of two (" + std::to_string(sb.bucket_size) + ")");
  if (sb.bucket_size < S::kMinBucketSize || sb.bucket_size > S::kMaxBucketSize)
    return Corrupt("bucket size out of range (" + std::to_string(sb.bucket_size) +
                   "; 4 KiB to 1 GiB)");
  if (sb.bucket_size < sb.block_size) return Corrupt("bucket size smaller than block size");
  if (sb.first_bucket == 0 || sb.first_bucket > S::kReservedBytes / S::kMinBucketSize ||
      sb.first_bucket * sb.bucket_size < kSuperblockOffset + kSuperblockSize)
    return Corrupt("first bucket overlaps the superblock (" + std::to_string(sb.first_bucket) + ")");
  if (sb.journal_buckets == 0) return Corrupt("no journal buckets");
  // The sums below cannot overflow: every term is checked against nbuckets,
  // and nbuckets * bucket_size is checked for overflow before the device test.
  if (sb.journal_buckets > sb.nbuckets || sb.first_bucket > sb.nbuckets - sb.journal_buckets ||
      sb.nbuckets - sb.journal_buckets - sb.first_bucket < S::kMinDataBuckets)
    return Corrupt("no room for data buckets (nbuckets " + std::to_string(sb.nbuckets) +
                   ", first bucket " + std::to_string(sb.first_bucket) + ", journal buckets " +
                   std::to_string(sb.journal_buckets) + ")");
  if (sb.nbuckets > UINT64_MAX / sb.bucket_size ||
      (device_size != 0 && sb.nbuckets * sb.bucket_size > device_size))
    return Corrupt("nbuckets does not fit the device (" + std::to_string(sb.nbuckets) + " x " +
                   std::to_string(sb.bucket_size) + " bytes > " + std::to_string(device_size) +
                   ")");
  if (static_cast<uint8_t>(sb.cache_mode) > static_cast<uint8_t>(CacheMode::kNone))
    return Corrupt("bad cache mode " + std::to_string(static_cast<int>(sb.cache_mode)));
  if (sb.has_btree_root()) {
    if (sb.btree_root_bucket < sb.data_bucket() || sb.btree_root_bucket >= sb.nbuckets)
      return Corrupt("btree root outside the data buckets (" +
                     std::to_string(sb.btree_root_bucket) + ")");
    if (sb.btree_root_offset >= sb.bucket_size || sb.btree_root_offset % sb.block_size != 0)
      return Corrupt("btree root offset outside its bucket or unaligned (" +
                     std::to_string(sb.btree_root_offset) + ")");
  } else if (sb.btree_root_offset != 0 || sb.btree_root_level != 0) {
    return Corrupt("btree root offset or level set without a root bucket");
  }
  if (sb.btree_root_level > S::kMaxBtreeLevel)
    return Corrupt("btree root level too deep (" + std::to_string(sb.btree_root_level) + ")");
  if (!sb.has_warm_state() &&
      (!sb.index_root.empty() || sb.bucket_table_offset || sb.bucket_table_len))
    return Corrupt("index root or bucket table without the warm-state feature");
  if (sb.index_root.size() > S::kMaxIndexRoot)
    return Corrupt("index root record too long (" + std::to_string(sb.index_root.size()) + ")");
  if (sb.bucket_table_len != 0) {
    uint64_t lo = sb.bucket_offset(sb.first_bucket), hi = sb.bucket_offset(sb.data_bucket());
    if (sb.bucket_table_offset < lo || sb.bucket_table_offset % sb.block_size != 0 ||
        sb.bucket_table_offset >= hi || sb.bucket_table_len > hi - sb.bucket_table_offset)
      return Corrupt("bucket table outside the journal area (offset " +
                     std::to_string(sb.bucket_table_offset) + ", " +
                     std::to_string(sb.bucket_table_len) + " bytes)");
  } else if (sb.bucket_table_offset != 0) {
    return Corrupt("bucket table offset set without a length");
  }
  if (!sb.has_fences() && !sb.fences.empty()) return Corrupt("fences without the fences feature");
  if (sb.has_fences() && (sb.fences.empty() || sb.fences.size() > S::kMaxFences))
    return Corrupt("bad fence count " + std::to_string(sb.fences.size()) + " (1 to " +
                   std::to_string(S::kMaxFences) + ")");
  for (const auto& f : sb.fences)
    if (IsZeroUuid(f.backing)) return Corrupt("fence for a zero uuid");
  return Status::OK();
}

Result<CacheSuperblock> DecodeCacheSuperblock(ConstSuperblockBlock b, uint64_t device_size,
                                              uint32_t device_block_size) {
  using namespace cache_off;
  const uint8_t* p = b.data();
  // The cascade: each check assumes the ones before it passed, and the first
  // failure is the one reported (bcache's `err = "..."; goto err;`).
  if (!Matches(p + kMagic, CacheSuperblock::kMagic)) {
    if (NearlyMatches(p + kMagic, CacheSuperblock::kMagic)) return Corrupt("bad magic");
    if (Matches(p + bch_off::kMagic, BackingSuperblock::kMagic))
      return Status::InvalidArgument(
          "superblock: a bcache superblock, not a ubcache cache superblock");
    return Status::NotFound("no ubcache/bcache superblock");
  }
  // Version before checksum: a future version may checksum differently.
  uint32_t version = LoadLE32(p + kVersion);
  if (version != CacheSuperblock::kVersion)
    return Corrupt("bad version " + std::to_string(version) + " (this build reads version " +
                   std::to_string(CacheSuperblock::kVersion) + ")");
  uint64_t stored = LoadLE64(p + kCsum), computed = CacheChecksum(b);
  if (stored != computed)
    return Corrupt("bad csum (stored " + Hex(stored) + ", computed " + Hex(computed) + ")");

  CacheSuperblock sb;
  sb.version = version;
  sb.csum = stored;
  sb.block_size = LoadLE32(p + kBlockSize);
  sb.uuid = GetUuid(p + kUuid);
  sb.set_uuid = GetUuid(p + kSetUuid);
  sb.label = GetLabel(p + kLabel);
  sb.feature_compat = LoadLE64(p + kFeatureCompat);
  sb.feature_ro_compat = LoadLE64(p + kFeatureRoCompat);
  sb.feature_incompat = LoadLE64(p + kFeatureIncompat);
  sb.flags = LoadLE64(p + kFlags);
  sb.seq = LoadLE64(p + kSeq);
  sb.created = LoadLE64(p + kCreated);
  sb.bucket_size = LoadLE64(p + kBucketSize);
  sb.nbuckets = LoadLE64(p + kNbuckets);
  sb.first_bucket = LoadLE64(p + kFirstBucket);
  sb.journal_buckets = LoadLE64(p + kJournalBuckets);
  sb.btree_root_bucket = LoadLE64(p + kBtreeRootBucket);
  sb.btree_root_offset = LoadLE32(p + kBtreeRootOffset);
  sb.btree_root_level = p[kBtreeRootLevel];
  sb.cache_mode = static_cast<CacheMode>(p[kCacheMode]);
  if (sb.has_warm_state()) {
    uint32_t n = LoadLE32(p + kIndexRootLen);
    if (n > CacheSuperblock::kMaxIndexRoot)
      return Corrupt("index root record too long (" + std::to_string(n) + ")");
    sb.index_root.assign(p + CacheSuperblock::kIndexRootOffset,
                         p + CacheSuperblock::kIndexRootOffset + n);
    sb.bucket_table_offset = LoadLE64(p + kBucketTableOffset);
    sb.bucket_table_len = LoadLE64(p + kBucketTableLen);
  }
  if (sb.has_fences()) {
    uint32_t n = LoadLE32(p + kFenceCount);
    if (n == 0 || n > CacheSuperblock::kMaxFences)
      return Corrupt("bad fence count " + std::to_string(n) + " (1 to " +
                     std::to_string(CacheSuperblock::kMaxFences) + ")");
    for (uint32_t i = 0; i < n; i++) {
      const uint8_t* f = p + CacheSuperblock::kFencesOffset + i * CacheSuperblock::kFenceSize;
      sb.fences.push_back({GetUuid(f), LoadLE64(f + 16)});
    }
  }
  UB_RETURN_IF_ERROR(ValidateCacheSuperblock(sb, device_size, device_block_size));
  return sb;
}

uint64_t DefaultJournalBuckets(uint64_t nbuckets) {
  uint64_t j = std::clamp<uint64_t>(nbuckets / 100, 8, 256);
  return std::max<uint64_t>(1, std::min(j, nbuckets / 4));
}

Result<CacheSuperblock> NewCacheSuperblock(const CacheFormatOptions& opts, uint64_t device_size,
                                           uint32_t device_block_size) {
  CacheSuperblock sb;
  sb.block_size = opts.block_size;
  sb.bucket_size = opts.bucket_size;
  sb.label = opts.label;
  sb.cache_mode = opts.cache_mode;
  if (sb.label.size() >= kLabelSize)
    return Status::InvalidArgument("label longer than 31 bytes");
  if (IsPowerOfTwo(sb.bucket_size)) {
    sb.nbuckets = device_size / sb.bucket_size;
    // The first bucket whose offset is at least 1 MiB: room for the
    // superblock, and alignment for whatever a partition tool expects.
    sb.first_bucket = std::max<uint64_t>(
        1, (CacheSuperblock::kReservedBytes + sb.bucket_size - 1) / sb.bucket_size);
  }
  sb.journal_buckets = opts.journal_buckets ? opts.journal_buckets
                                            : DefaultJournalBuckets(sb.nbuckets);
  UB_ASSIGN_OR_RETURN(sb.uuid, RandomUuid());
  UB_ASSIGN_OR_RETURN(sb.set_uuid, RandomUuid());
  sb.flags = CacheSuperblock::kFlagClean;
  sb.feature_incompat = CacheSuperblock::kIncompatWarmState;  // no root, no table: empty
  sb.seq = 1;
  sb.created = static_cast<uint64_t>(std::time(nullptr));
  Status st = ValidateCacheSuperblock(sb, device_size, device_block_size);
  if (!st.ok()) {
    std::string why = st.message();
    if (why.rfind("superblock: ", 0) == 0) why = why.substr(12);
    return Status::InvalidArgument("cannot lay out a cache on " + FormatSize(device_size) + ": " +
                                   why);
  }
  return sb;
}

// --- backing superblock (bcache layout) -------------------------------------

void EncodeBackingSuperblock(const BackingSuperblock& sb, SuperblockBlock b) {
  using namespace bch_off;
  uint8_t* p = b.data();
  std::memset(p, 0, kSuperblockSize);
  StoreLE64(p + kOffset, BackingSuperblock::kSbSector);
  StoreLE64(p + kVersion, sb.version);
  std::memcpy(p + kMagic, BackingSuperblock::kMagic.data(), 16);
  std::memcpy(p + kUuid, sb.uuid.data(), 16);
  std::memcpy(p + kSetUuid, sb.set_uuid.data(), 16);
  PutLabel(p + kLabel, sb.label);
  uint64_t flags = (sb.other_flags & ~(kCacheModeMask | kStateMask)) |
                   (static_cast<uint64_t>(sb.cache_mode) & kCacheModeMask) |
                   (static_cast<uint64_t>(sb.state) << kStateShift & kStateMask);
  StoreLE64(p + kFlags, flags);
  StoreLE64(p + kSeq, sb.seq);
  // Version 1 predates data_offset: the field stays zero and the data starts
  // at sector 16 (the kernel and bcache-super-show read it that way).
  assert(sb.version != BackingSuperblock::kVersionBdev ||
         sb.data_offset == BackingSuperblock::kDefaultDataOffset);
  if (sb.version != BackingSuperblock::kVersionBdev) StoreLE64(p + kDataOffset, sb.data_offset);
  StoreLE16(p + kBlockSize, sb.block_size);
  StoreLE16(p + kBucketSize, sb.bucket_size);
  StoreLE32(p + kLastMount, sb.last_mount);
  StoreLE64(p + kDirtySince, sb.dirty_since);
  p[kWritebackOrder] = static_cast<uint8_t>(sb.writeback_order);
  StoreLE64(p + kConsistentAsOf, sb.consistent_as_of);
  // first_bucket, keys and d[] are cache-device fields: zero. keys = 0 also
  // keeps bcache-super-show from taking it for an "experimental format".
  StoreLE64(p + kCsum, BackingChecksum(b, 0));
}

Status ValidateBackingSuperblock(const BackingSuperblock& sb, uint64_t device_size,
                                 uint32_t device_block_size) {
  using B = BackingSuperblock;
  if (IsZeroUuid(sb.uuid)) return Corrupt("uuid is zero");
  UB_RETURN_IF_ERROR(CheckLabel(sb.label));
  if (!IsPowerOfTwo(sb.block_size))
    return Corrupt("block size not a power of two (" + std::to_string(sb.block_size) +
                   " sectors)");
  if (sb.block_size_bytes() < device_block_size)
    return Corrupt("block size smaller than the device's logical block size (" +
                   std::to_string(sb.block_size_bytes()) + " < " +
                   std::to_string(device_block_size) + ")");
  if (sb.data_offset < B::kDefaultDataOffset)
    return Corrupt("data offset before sector 16 (" + std::to_string(sb.data_offset) + ")");
  if (sb.version == B::kVersionBdev && sb.data_offset != B::kDefaultDataOffset)
    return Corrupt("data offset other than sector 16 in a version 1 superblock");
  if (sb.data_offset % sb.block_size != 0)
    return Corrupt("data offset not a multiple of the block size (" +
                   std::to_string(sb.data_offset) + " sectors)");
  if (sb.data_offset > UINT64_MAX / kSectorSize ||
      (device_size != 0 && sb.data_offset_bytes() >= device_size))
    return Corrupt("data offset beyond the end of the device (" +
                   std::to_string(sb.data_offset) + " sectors)");
  if (static_cast<uint8_t>(sb.cache_mode) > static_cast<uint8_t>(CacheMode::kNone))
    return Corrupt("bad cache mode " + std::to_string(static_cast<int>(sb.cache_mode)));
  if (sb.state != BackingState::kNone && IsZeroUuid(sb.set_uuid))
    return Corrupt(std::string("state ") + BackingStateName(sb.state) + " without a cache set uuid");
  if (static_cast<uint8_t>(sb.writeback_order) > static_cast<uint8_t>(WritebackOrder::kLba))
    return Corrupt("bad writeback order " + std::to_string(static_cast<int>(sb.writeback_order)));
  return Status::OK();
}

Result<BackingSuperblock> DecodeBackingSuperblock(ConstSuperblockBlock b, uint64_t device_size,
                                                  uint32_t device_block_size) {
  using namespace bch_off;
  using B = BackingSuperblock;
  const uint8_t* p = b.data();
  if (!Matches(p + kMagic, B::kMagic)) {
    if (NearlyMatches(p + kMagic, B::kMagic)) return Corrupt("bad magic");
    if (Matches(p + cache_off::kMagic, CacheSuperblock::kMagic))
      return Status::InvalidArgument(
          "superblock: a ubcache cache superblock, not a bcache backing superblock");
    return Status::NotFound("no ubcache/bcache superblock");
  }
  // The kernel's read_super() order: offset, magic, keys, csum; then version.
  uint64_t offset = LoadLE64(p + kOffset);
  if (offset != B::kSbSector)
    return Corrupt("bad offset " + std::to_string(offset) + " (expected sector 8)");
  uint64_t version = LoadLE64(p + kVersion);
  if (IsBcacheCacheVersion(version))
    return Status::NotSupported("superblock: a bcache cache device (version " +
                                std::to_string(version) +
                                "), not supported: ubcache caches use their own format "
                                "('ubcache format --cache')");
  if (version != B::kVersionBdev && version != B::kVersionBdevWithOffset)
    return Corrupt("bad version " + std::to_string(version) +
                   " (this build reads backing versions 1 and 4)");
  uint16_t keys = LoadLE16(p + kKeys);
  if (keys > B::kJournalBuckets)
    return Corrupt("too many journal buckets (keys " + std::to_string(keys) + ")");
  uint64_t stored = LoadLE64(p + kCsum), computed = BackingChecksum(b, keys);
  if (stored != computed)
    return Corrupt("bad csum (stored " + Hex(stored) + ", computed " + Hex(computed) + ")");

  BackingSuperblock sb;
  sb.version = version;
  sb.csum = stored;
  sb.uuid = GetUuid(p + kUuid);
  sb.set_uuid = GetUuid(p + kSetUuid);
  sb.label = GetLabel(p + kLabel);
  uint64_t flags = LoadLE64(p + kFlags);
  sb.cache_mode = static_cast<CacheMode>(flags & kCacheModeMask);  // Validate checks the range
  sb.state = static_cast<BackingState>((flags & kStateMask) >> kStateShift);
  sb.other_flags = flags & ~(kCacheModeMask | kStateMask);
  sb.seq = LoadLE64(p + kSeq);
  sb.data_offset =
      version == B::kVersionBdev ? B::kDefaultDataOffset : LoadLE64(p + kDataOffset);
  sb.block_size = LoadLE16(p + kBlockSize);
  sb.bucket_size = LoadLE16(p + kBucketSize);
  sb.last_mount = LoadLE32(p + kLastMount);
  sb.dirty_since = LoadLE64(p + kDirtySince);
  sb.writeback_order = static_cast<WritebackOrder>(p[kWritebackOrder]);  // Validate checks the range
  sb.consistent_as_of = LoadLE64(p + kConsistentAsOf);
  UB_RETURN_IF_ERROR(ValidateBackingSuperblock(sb, device_size, device_block_size));
  return sb;
}

Result<BackingSuperblock> NewBackingSuperblock(const BackingFormatOptions& opts,
                                               uint64_t device_size, uint32_t device_block_size) {
  if (opts.label.size() >= kLabelSize) return Status::InvalidArgument("label longer than 31 bytes");
  if (opts.data_offset < 8192 || opts.data_offset % 4096 != 0)
    return Status::InvalidArgument("data offset must be a multiple of 4 KiB, at least 8 KiB (got " +
                                   std::to_string(opts.data_offset) + ")");
  if (opts.data_offset % device_block_size != 0)
    return Status::InvalidArgument("data offset not a multiple of the device's block size " +
                                   std::to_string(device_block_size));
  if (opts.data_offset >= device_size)
    return Status::InvalidArgument("data offset " + FormatSize(opts.data_offset) +
                                   " leaves no room for data on " + FormatSize(device_size));
  BackingSuperblock sb;
  sb.version = BackingSuperblock::kVersionBdevWithOffset;
  UB_ASSIGN_OR_RETURN(sb.uuid, RandomUuid());
  sb.set_uuid = opts.set_uuid;
  sb.label = opts.label;
  sb.cache_mode = opts.cache_mode;
  sb.state = IsZeroUuid(opts.set_uuid) ? BackingState::kNone : BackingState::kClean;
  sb.seq = 1;
  sb.data_offset = opts.data_offset / kSectorSize;
  // The cache's block size is what matters once attached; 4 KiB suits every
  // device we open with O_DIRECT, and no less than the device's own.
  sb.block_size = static_cast<uint16_t>(std::max<uint32_t>(4096, device_block_size) / kSectorSize);
  sb.bucket_size = 1024;  // as make-bcache writes it; unused for backing devices
  UB_RETURN_IF_ERROR(ValidateBackingSuperblock(sb, device_size, device_block_size));
  return sb;
}

// --- device helpers ---------------------------------------------------------

namespace {

Status CheckDeviceForSuperblock(const BlockDevice& dev) {
  if (dev.logical_block_size() > kSuperblockSize)
    return Status::NotSupported(dev.spec() + ": logical block size " +
                                std::to_string(dev.logical_block_size()) +
                                " is larger than the 4 KiB superblock");
  return Status::OK();
}

// Reads the superblock block; NotFound when the device is too small to hold one.
Result<AlignedBuffer> ReadBlock(BlockDevice& dev) {
  UB_RETURN_IF_ERROR(CheckDeviceForSuperblock(dev));
  if (dev.size() < kSuperblockOffset + kSuperblockSize)
    return Status::NotFound("no ubcache/bcache superblock (device smaller than 8 KiB)");
  AlignedBuffer buf(kSuperblockSize);
  UB_RETURN_IF_ERROR(SyncRead(dev, kSuperblockOffset, kSuperblockSize, buf.data()));
  return buf;
}

// Durability ordering: the superblock points at the journal and the btree
// root, so everything written before it must reach media first (the leading
// flush), and the caller may rely on it once we return (the trailing flush).
// A FUA write would cover the second but not the first; bcache likewise
// writes its superblock with PREFLUSH | FUA.
Status WriteBlockDurably(BlockDevice& dev, const AlignedBuffer& buf) {
  UB_RETURN_IF_ERROR(CheckDeviceForSuperblock(dev));
  UB_RETURN_IF_ERROR(SyncFlush(dev));
  UB_RETURN_IF_ERROR(SyncWrite(dev, kSuperblockOffset, kSuperblockSize, buf.data()));
  return SyncFlush(dev);
}

std::string Prefix(const BlockDevice& dev, const Status& st) {
  return dev.spec() + ": " + st.message();
}

// Same code, message prefixed with the device.
Status Named(const BlockDevice& dev, const Status& st) {
  switch (st.code()) {
    case Status::Code::kCorruption: return Status::Corruption(Prefix(dev, st));
    case Status::Code::kNotFound: return Status::NotFound(Prefix(dev, st));
    case Status::Code::kNotSupported: return Status::NotSupported(Prefix(dev, st));
    case Status::Code::kInvalidArgument: return Status::InvalidArgument(Prefix(dev, st));
    default: return st;
  }
}

}  // namespace

Result<SuperblockKind> Probe(BlockDevice& dev) {
  auto buf = ReadBlock(dev);
  if (!buf.ok()) {
    if (buf.status().IsNotFound()) return SuperblockKind::kNone;
    return buf.status();
  }
  const uint8_t* p = buf->data();
  if (Matches(p + cache_off::kMagic, CacheSuperblock::kMagic)) return SuperblockKind::kCache;
  if (Matches(p + bch_off::kMagic, BackingSuperblock::kMagic))
    return IsBcacheCacheVersion(LoadLE64(p + bch_off::kVersion)) ? SuperblockKind::kBcacheCache
                                                                 : SuperblockKind::kBacking;
  if (NearlyMatches(p + cache_off::kMagic, CacheSuperblock::kMagic) ||
      NearlyMatches(p + bch_off::kMagic, BackingSuperblock::kMagic))
    return Status::Corruption(dev.spec() + ": superblock: bad magic");
  return SuperblockKind::kNone;
}

Result<CacheSuperblock> ReadCacheSuperblock(BlockDevice& dev) {
  auto buf = ReadBlock(dev);
  if (!buf.ok()) return Named(dev, buf.status());
  auto sb = DecodeCacheSuperblock(ConstSuperblockBlock(buf->data(), kSuperblockSize), dev.size(),
                                  dev.logical_block_size());
  if (!sb.ok()) return Named(dev, sb.status());
  return sb;
}

Result<BackingSuperblock> ReadBackingSuperblock(BlockDevice& dev) {
  auto buf = ReadBlock(dev);
  if (!buf.ok()) return Named(dev, buf.status());
  auto sb = DecodeBackingSuperblock(ConstSuperblockBlock(buf->data(), kSuperblockSize), dev.size(),
                                    dev.logical_block_size());
  if (!sb.ok()) return Named(dev, sb.status());
  return sb;
}

Status WriteCacheSuperblock(BlockDevice& dev, const CacheSuperblock& sb) {
  // Never write what we would refuse to read back.
  Status st = ValidateCacheSuperblock(sb, dev.size(), dev.logical_block_size());
  if (!st.ok()) return Named(dev, st);
  AlignedBuffer buf(kSuperblockSize);
  EncodeCacheSuperblock(sb, SuperblockBlock(buf.data(), kSuperblockSize));
  return WriteBlockDurably(dev, buf);
}

Status WriteBackingSuperblock(BlockDevice& dev, const BackingSuperblock& sb) {
  Status st = ValidateBackingSuperblock(sb, dev.size(), dev.logical_block_size());
  if (!st.ok()) return Named(dev, st);
  AlignedBuffer buf(kSuperblockSize);
  EncodeBackingSuperblock(sb, SuperblockBlock(buf.data(), kSuperblockSize));
  return WriteBlockDurably(dev, buf);
}

}  // namespace ubcache
