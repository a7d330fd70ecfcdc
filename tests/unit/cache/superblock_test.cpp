// SPDX-License-Identifier: Apache-2.0
// Superblock codecs and device helpers: every field round-trips, every
// damage is reported by the cascade's exact check, blank is told apart from
// corrupt, and the backing layout is byte-for-byte bcache's.
#include "cache/superblock.h"

#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/reactor.h"
#include "backend/sync_io.h"
#include "cache/backing_super.h"
#include "util/aligned_buffer.h"
#include "util/endian.h"
#include "util/hash.h"

using namespace ubcache;

namespace {

using Block = std::array<uint8_t, kSuperblockSize>;

std::unique_ptr<Reactor> BoundReactor() {
  auto r = Reactor::Create();
  REQUIRE(r.ok());
  std::unique_ptr<Reactor> reactor = std::move(r).value();
  reactor->Bind();
  return reactor;
}

std::unique_ptr<BlockDevice> Mem(const std::string& spec) {
  auto d = OpenDevice(spec);
  REQUIRE(d.ok());
  return std::move(d).value();
}

Uuid U(uint8_t first) {
  Uuid u;
  for (size_t i = 0; i < u.size(); i++) u[i] = static_cast<uint8_t>(first + i);
  return u;
}

constexpr uint64_t kDev = 64ull << 20;  // the device the sample cache superblock describes

// A cache superblock with a distinct, valid value in every field.
CacheSuperblock SampleCache() {
  CacheSuperblock sb;
  sb.uuid = U(0x10);
  sb.set_uuid = U(0x20);
  sb.label = "fast-ssd";
  sb.feature_compat = 0x8000000000000001ull;  // unknown compat bits are ignored
  sb.feature_ro_compat = 0x4;                 // unknown ro_compat: readable, not writable
  sb.feature_incompat = 0;
  sb.flags = CacheSuperblock::kFlagClean | (1ull << 40);
  sb.seq = 0x0102030405060708ull;
  sb.created = 1700000000;
  sb.block_size = 8192;
  sb.cache_mode = CacheMode::kWritearound;
  sb.bucket_size = 256 * 1024;
  sb.nbuckets = 250;  // 62.5 MiB of a 64 MiB device
  sb.first_bucket = 4;
  sb.journal_buckets = 9;
  sb.btree_root_bucket = 200;
  sb.btree_root_offset = 3 * 8192;
  sb.btree_root_level = 2;
  return sb;
}

BackingSuperblock SampleBacking() {
  BackingSuperblock sb;
  sb.version = BackingSuperblock::kVersionBdevWithOffset;
  sb.uuid = U(0x30);
  sb.set_uuid = U(0x40);
  sb.label = "slow-disk";
  sb.cache_mode = CacheMode::kWriteback;
  sb.state = BackingState::kDirty;
  sb.other_flags = 1ull << 20;
  sb.seq = 77;
  sb.data_offset = 2048;  // 1 MiB
  sb.block_size = 8;
  sb.bucket_size = 1024;
  sb.last_mount = 1234567890;
  sb.dirty_since = 1796400000;
  sb.consistent_as_of = 1796400042;
  return sb;
}

Block Encode(const CacheSuperblock& sb) {
  Block b;
  EncodeCacheSuperblock(sb, b);
  return b;
}
Block Encode(const BackingSuperblock& sb) {
  Block b;
  EncodeBackingSuperblock(sb, b);
  return b;
}

void RefreshBackingCsum(Block& b) {
  uint16_t keys = LoadLE16(b.data() + 206);
  StoreLE64(b.data(), BcacheCrc64(b.data() + 8, 208 + 8 * size_t{keys} - 8));
}

}  // namespace

// --- cache superblock -------------------------------------------------------

TEST_CASE("cache superblock: every field survives encode and decode") {
  CacheSuperblock in = SampleCache();
  Block b = Encode(in);
  auto out = DecodeCacheSuperblock(b, kDev, 4096);
  REQUIRE(out.ok());
  CHECK(out->version == 1);
  CHECK(out->uuid == in.uuid);
  CHECK(out->set_uuid == in.set_uuid);
  CHECK(out->label == "fast-ssd");
  CHECK(out->feature_compat == in.feature_compat);
  CHECK(out->feature_ro_compat == in.feature_ro_compat);
  CHECK(out->feature_incompat == 0);
  CHECK(out->flags == in.flags);
  CHECK(out->clean());
  CHECK(out->seq == in.seq);
  CHECK(out->created == in.created);
  CHECK(out->block_size == 8192);
  CHECK(out->cache_mode == CacheMode::kWritearound);
  CHECK(out->bucket_size == 256 * 1024);
  CHECK(out->nbuckets == 250);
  CHECK(out->first_bucket == 4);
  CHECK(out->journal_buckets == 9);
  CHECK(out->data_bucket() == 13);
  CHECK(out->btree_root_bucket == 200);
  CHECK(out->btree_root_offset == 3 * 8192);
  CHECK(out->btree_root_level == 2);
  CHECK(out->csum == LoadLE64(b.data() + 16));
  CHECK_FALSE(out->writable_by_this_build());
  // Re-encoding the decoded value gives the same bytes.
  CHECK(Encode(*out) == b);
}

TEST_CASE("cache superblock: a 32-byte label fills the field without a NUL") {
  CacheSuperblock in = SampleCache();
  in.label = std::string(32, 'L');
  Block b = Encode(in);
  auto out = DecodeCacheSuperblock(b);
  REQUIRE(out.ok());
  CHECK(out->label == in.label);
}

TEST_CASE("cache superblock: the layout is pinned (offsets, little-endian, checksum)") {
  Block b = Encode(SampleCache());
  const uint8_t* p = b.data();
  CHECK(std::memcmp(p, CacheSuperblock::kMagic.data(), 16) == 0);
  CHECK(p[0] == 0x89);
  CHECK(std::memcmp(p + 1, "UBCACHE\r\n\x1a\n", 11) == 0);
  CHECK(LoadLE32(p + 24) == 1);     // version
  CHECK(LoadLE32(p + 28) == 8192);  // block_size
  CHECK(p[32] == 0x10);             // uuid
  CHECK(p[48] == 0x20);             // set_uuid
  CHECK(std::string(reinterpret_cast<const char*>(p + 64)) == "fast-ssd");
  CHECK(LoadLE64(p + 96) == 0x8000000000000001ull);  // feature_compat
  CHECK(LoadLE64(p + 104) == 4);                     // feature_ro_compat
  CHECK(LoadLE64(p + 112) == 0);                     // feature_incompat
  CHECK(LoadLE64(p + 120) == (1 | (1ull << 40)));    // flags
  CHECK(p[128] == 0x08);                             // seq, least significant byte first
  CHECK(p[135] == 0x01);
  CHECK(LoadLE64(p + 136) == 1700000000);  // created
  CHECK(LoadLE64(p + 144) == 256 * 1024);  // bucket_size
  CHECK(LoadLE64(p + 152) == 250);         // nbuckets
  CHECK(LoadLE64(p + 160) == 4);           // first_bucket
  CHECK(LoadLE64(p + 168) == 9);           // journal_buckets
  CHECK(LoadLE64(p + 176) == 200);         // btree_root_bucket
  CHECK(LoadLE32(p + 184) == 3 * 8192);    // btree_root_offset
  CHECK(p[188] == 2);                      // btree_root_level
  CHECK(p[189] == 2);                      // cache_mode writearound
  for (size_t i = 190; i < kSuperblockSize; i++) REQUIRE(p[i] == 0);
  // The checksum is XXH3-64 over the block with the csum field zero.
  Block z = b;
  std::memset(z.data() + 16, 0, 8);
  CHECK(LoadLE64(p + 16) == Hash64(z.data(), z.size()));
}

TEST_CASE("cache superblock: each damage is named by the first failed check") {
  struct Case {
    const char* name;
    std::function<void(Block&)> damage;
    Status::Code code;
    std::string message;  // exact, or a prefix when it ends in '*'
  };
  auto reencode = [](std::function<void(CacheSuperblock&)> f) {
    return [f](Block& b) {
      CacheSuperblock sb = SampleCache();
      f(sb);
      EncodeCacheSuperblock(sb, b);
    };
  };
  const Case cases[] = {
      {"one byte of magic", [](Block& b) { b[3] ^= 0x40; }, Status::Code::kCorruption,
       "superblock: bad magic"},
      {"two bytes of magic", [](Block& b) { b[0] = 0; b[15] = 0; }, Status::Code::kCorruption,
       "superblock: bad magic"},
      {"version", [](Block& b) { b[25] ^= 1; }, Status::Code::kCorruption,
       "superblock: bad version 257 (this build reads version 1)"},
      {"a label byte", [](Block& b) { b[70] ^= 1; }, Status::Code::kCorruption,
       "superblock: bad csum (stored *"},
      {"a reserved byte near the end", [](Block& b) { b[4000] = 0xff; },
       Status::Code::kCorruption, "superblock: bad csum (stored *"},
      {"the checksum itself", [](Block& b) { b[16] ^= 0x80; }, Status::Code::kCorruption,
       "superblock: bad csum (stored *"},
      {"unknown incompat feature", reencode([](auto& s) { s.feature_incompat = 1ull << 5; }),
       Status::Code::kNotSupported, "superblock: unsupported incompat features 0x0000000000000020"},
      {"zero uuid", reencode([](auto& s) { s.uuid = {}; }), Status::Code::kCorruption,
       "superblock: uuid is zero"},
      {"zero set uuid", reencode([](auto& s) { s.set_uuid = {}; }), Status::Code::kCorruption,
       "superblock: set uuid is zero"},
      {"block size 3000", reencode([](auto& s) { s.block_size = 3000; }),
       Status::Code::kCorruption, "superblock: block size not a power of two (3000)"},
      {"block size 256", reencode([](auto& s) { s.block_size = 256; }), Status::Code::kCorruption,
       "superblock: block size out of range (256; 512 to 65536)"},
      {"bucket size 300000", reencode([](auto& s) { s.bucket_size = 300000; }),
       Status::Code::kCorruption, "superblock: bucket size not a power of two (300000)"},
      {"bucket size below block size", reencode([](auto& s) { s.bucket_size = 4096; }),
       Status::Code::kCorruption, "superblock: bucket size smaller than block size"},
      {"first bucket 0", reencode([](auto& s) { s.first_bucket = 0; }), Status::Code::kCorruption,
       "superblock: first bucket overlaps the superblock (0)"},
      {"no journal", reencode([](auto& s) { s.journal_buckets = 0; }), Status::Code::kCorruption,
       "superblock: no journal buckets"},
      {"journal fills the device", reencode([](auto& s) { s.journal_buckets = 240; }),
       Status::Code::kCorruption,
       "superblock: no room for data buckets (nbuckets 250, first bucket 4, journal buckets 240)"},
      {"nbuckets past the device", reencode([](auto& s) { s.nbuckets = 257; }),
       Status::Code::kCorruption,
       "superblock: nbuckets does not fit the device (257 x 262144 bytes > 67108864)"},
      {"nbuckets overflowing 64 bits", reencode([](auto& s) { s.nbuckets = 1ull << 60; }),
       Status::Code::kCorruption, "superblock: nbuckets does not fit the device*"},
      {"cache mode 9", [](Block& b) {
         b[189] = 9;
         StoreLE64(b.data() + 16, 0);
         StoreLE64(b.data() + 16, Hash64(b.data(), b.size()));
       },
       Status::Code::kCorruption, "superblock: bad cache mode 9"},
      {"btree root in the journal", reencode([](auto& s) { s.btree_root_bucket = 5; }),
       Status::Code::kCorruption, "superblock: btree root outside the data buckets (5)"},
      {"btree root past the end", reencode([](auto& s) { s.btree_root_bucket = 250; }),
       Status::Code::kCorruption, "superblock: btree root outside the data buckets (250)"},
      {"btree root offset unaligned", reencode([](auto& s) { s.btree_root_offset = 100; }),
       Status::Code::kCorruption,
       "superblock: btree root offset outside its bucket or unaligned (100)"},
      {"btree root level 16", reencode([](auto& s) { s.btree_root_level = 16; }),
       Status::Code::kCorruption, "superblock: btree root level too deep (16)"},
      {"root level without a root", reencode([](auto& s) {
         s.btree_root_bucket = 0;
         s.btree_root_offset = 0;
       }),
       Status::Code::kCorruption, "superblock: btree root offset or level set without a root bucket"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    Block b = Encode(SampleCache());
    c.damage(b);
    auto r = DecodeCacheSuperblock(b, kDev, 4096);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == c.code);
    if (c.message.back() == '*')
      CHECK_THAT(r.status().message(),
                 Catch::StartsWith(c.message.substr(0, c.message.size() - 1)));
    else
      CHECK(r.status().message() == c.message);
  }
}

TEST_CASE("cache superblock: fences round-trip at 216 and 224 under incompat bit 1") {
  CacheSuperblock in = SampleCache();
  in.feature_incompat = CacheSuperblock::kIncompatFences;
  Uuid a{}, b2{};
  a[0] = 0xaa;
  b2[15] = 0xbb;
  in.fences = {{a, 1800000000}, {b2, 1800000123}};
  Block b = Encode(in);
  const uint8_t* p = b.data();
  CHECK(LoadLE64(p + 112) == 2);  // feature_incompat bit 1
  CHECK(LoadLE32(p + 216) == 2);  // fence count
  CHECK(p[224] == 0xaa);          // first fence's uuid
  CHECK(LoadLE64(p + 240) == 1800000000);
  CHECK(p[248 + 15] == 0xbb);     // second fence's uuid
  CHECK(LoadLE64(p + 264) == 1800000123);
  for (size_t i = 272; i < kSuperblockSize; i++) REQUIRE(p[i] == 0);
  auto out = DecodeCacheSuperblock(b, kDev, 4096);
  REQUIRE(out.ok());
  CHECK(out->has_fences());
  CHECK(out->fences == in.fences);
  CHECK(Encode(*out) == b);
  CHECK(CacheSuperblock::kMaxFences == 12);
}

TEST_CASE("cache superblock: a damaged fence list is named") {
  auto damaged = [](std::function<void(CacheSuperblock&)> f) {
    CacheSuperblock sb = SampleCache();
    sb.feature_incompat = CacheSuperblock::kIncompatFences;
    Uuid u{};
    u[3] = 1;
    sb.fences = {{u, 1}};
    f(sb);
    return sb;
  };
  SECTION("a fence list without the feature bit is refused before it is written") {
    CacheSuperblock sb = damaged([](CacheSuperblock& s) { s.feature_incompat = 0; });
    CHECK(ValidateCacheSuperblock(sb, kDev, 4096).message() == "superblock: fences without the fences feature");
  }
  SECTION("the feature bit with no fence") {
    Block b = Encode(damaged([](CacheSuperblock& s) { s.fences.clear(); }));
    auto r = DecodeCacheSuperblock(b, kDev, 4096);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == "superblock: bad fence count 0 (1 to 12)");
  }
  SECTION("a count past the room") {
    Block b = Encode(damaged([](CacheSuperblock&) {}));
    StoreLE32(b.data() + 216, 13);
    StoreLE64(b.data() + 16, 0);
    StoreLE64(b.data() + 16, Hash64(b.data(), b.size()));
    auto r = DecodeCacheSuperblock(b, kDev, 4096);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == "superblock: bad fence count 13 (1 to 12)");
  }
  SECTION("a zero uuid") {
    Block b = Encode(damaged([](CacheSuperblock& s) { s.fences[0].backing = {}; }));
    auto r = DecodeCacheSuperblock(b, kDev, 4096);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == "superblock: fence for a zero uuid");
  }
}

TEST_CASE("cache superblock: block size below the device's logical block size is refused") {
  Block b = Encode(SampleCache());  // 8 KiB blocks
  auto r = DecodeCacheSuperblock(b, kDev, 16384);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "superblock: block size smaller than the device's logical block size (8192 < 16384)");
}

TEST_CASE("blank or foreign blocks are NotFound, not corrupt") {
  Block zeros{};
  auto c = DecodeCacheSuperblock(zeros);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().IsNotFound());
  CHECK(c.status().message() == "no ubcache/bcache superblock");
  auto k = DecodeBackingSuperblock(zeros);
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().IsNotFound());
  CHECK(k.status().message() == "no ubcache/bcache superblock");

  Block text;
  for (size_t i = 0; i < text.size(); i++) text[i] = "lorem ipsum "[i % 12];
  CHECK(DecodeCacheSuperblock(text).status().IsNotFound());
  CHECK(DecodeBackingSuperblock(text).status().IsNotFound());
}

TEST_CASE("asking for one kind of superblock when the other is there says which it is") {
  auto c = DecodeCacheSuperblock(Encode(SampleBacking()));
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().IsInvalidArgument());
  CHECK(c.status().message() == "superblock: a bcache superblock, not a ubcache cache superblock");
  auto k = DecodeBackingSuperblock(Encode(SampleCache()));
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().IsInvalidArgument());
  CHECK(k.status().message() ==
        "superblock: a ubcache cache superblock, not a bcache backing superblock");
}

TEST_CASE("NewCacheSuperblock lays out buckets past 1 MiB and ~1% journal") {
  SECTION("256 MiB, defaults") {
    auto sb = NewCacheSuperblock({}, 256ull << 20, 512);
    REQUIRE(sb.ok());
    CHECK(sb->bucket_size == 512 * 1024);
    CHECK(sb->block_size == 4096);
    CHECK(sb->nbuckets == 512);
    CHECK(sb->first_bucket == 2);
    CHECK(sb->journal_buckets == 8);
    CHECK(sb->clean());
    CHECK(sb->seq == 1);
    CHECK_FALSE(sb->has_btree_root());
    CHECK_FALSE(IsZeroUuid(sb->uuid));
    CHECK_FALSE(IsZeroUuid(sb->set_uuid));
    CHECK(sb->uuid != sb->set_uuid);
  }
  SECTION("100 GiB: journal 1% capped at 256") {
    auto sb = NewCacheSuperblock({}, 100ull << 30, 512);
    REQUIRE(sb.ok());
    CHECK(sb->nbuckets == 204800);
    CHECK(sb->journal_buckets == 256);
  }
  SECTION("4 KiB buckets start at bucket 256") {
    CacheFormatOptions o;
    o.bucket_size = 4096;
    auto sb = NewCacheSuperblock(o, 64ull << 20, 512);
    REQUIRE(sb.ok());
    CHECK(sb->first_bucket == 256);
  }
  SECTION("too small a device says why") {
    auto sb = NewCacheSuperblock({}, 4ull << 20, 512);
    REQUIRE_FALSE(sb.ok());
    CHECK(sb.status().IsInvalidArgument());
    CHECK(sb.status().message() ==
          "cannot lay out a cache on 4 MiB: no room for data buckets (nbuckets 8, first "
          "bucket 2, journal buckets 2)");
  }
  SECTION("a bucket size that is not a power of two") {
    CacheFormatOptions o;
    o.bucket_size = 500000;
    auto sb = NewCacheSuperblock(o, 64ull << 20, 512);
    REQUIRE_FALSE(sb.ok());
    CHECK(sb.status().message() ==
          "cannot lay out a cache on 64 MiB: bucket size not a power of two (500000)");
  }
}

// --- backing superblock (bcache) --------------------------------------------

TEST_CASE("backing superblock: every field survives encode and decode") {
  BackingSuperblock in = SampleBacking();
  Block b = Encode(in);
  auto out = DecodeBackingSuperblock(b, 1ull << 30, 512);
  REQUIRE(out.ok());
  CHECK(out->version == 4);
  CHECK(out->uuid == in.uuid);
  CHECK(out->set_uuid == in.set_uuid);
  CHECK(out->label == "slow-disk");
  CHECK(out->cache_mode == CacheMode::kWriteback);
  CHECK(out->state == BackingState::kDirty);
  CHECK(out->other_flags == 1ull << 20);
  CHECK(out->seq == 77);
  CHECK(out->data_offset == 2048);
  CHECK(out->data_offset_bytes() == 1 << 20);
  CHECK(out->block_size == 8);
  CHECK(out->bucket_size == 1024);
  CHECK(out->last_mount == 1234567890);
  CHECK(out->dirty_since == 1796400000);
  CHECK(out->consistent_as_of == 1796400042);
  CHECK(out->csum == LoadLE64(b.data()));
  CHECK(Encode(*out) == b);
}

TEST_CASE("backing superblock: every cache mode and state round-trips through flags") {
  for (int m = 0; m < 4; m++) {
    for (int s = 0; s < 4; s++) {
      BackingSuperblock in = SampleBacking();
      in.cache_mode = static_cast<CacheMode>(m);
      in.state = static_cast<BackingState>(s);
      Block b = Encode(in);
      CHECK(LoadLE64(b.data() + 104) == (uint64_t(m) | uint64_t(s) << 61 | 1ull << 20));
      auto out = DecodeBackingSuperblock(b);
      REQUIRE(out.ok());
      CHECK(out->cache_mode == in.cache_mode);
      CHECK(out->state == in.state);
    }
  }
}

TEST_CASE("backing superblock: writeback_order is byte 152, inside the checksum, and > 1 is refused") {
  BackingSuperblock in = SampleBacking();
  CHECK(Encode(in)[152] == 0);  // flush: also what a superblock from before the field says
  in.writeback_order = WritebackOrder::kLba;
  Block b = Encode(in);
  CHECK(b[152] == 1);
  auto out = DecodeBackingSuperblock(b);
  REQUIRE(out.ok());
  CHECK(out->writeback_order == WritebackOrder::kLba);
  Block flipped = b;
  flipped[152] = 0;
  CHECK(!DecodeBackingSuperblock(flipped).ok());  // bad csum: the byte is covered
  in.writeback_order = static_cast<WritebackOrder>(2);
  auto bad = DecodeBackingSuperblock(Encode(in));
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("bad writeback order 2") != std::string::npos);
}

TEST_CASE("backing superblock: the layout is bcache's struct cache_sb_disk") {
  // Offsets from the kernel's include/uapi/linux/bcache.h (now
  // drivers/md/bcache/bcache_ondisk.h): csum 0, offset 8, version 16,
  // magic 24, uuid 40, set_uuid 56, label[32] 72, flags 104, seq 112,
  // pad[8] 120, data_offset (nbuckets) 184, block_size 192, bucket_size 194,
  // nr_in_set 196, nr_this_dev 198, last_mount 200, first_bucket 204,
  // keys 206, d[256] 208.
  Block b = Encode(SampleBacking());
  const uint8_t* p = b.data();
  CHECK(LoadLE64(p + 8) == 8);   // offset: the sector of the superblock
  CHECK(LoadLE64(p + 16) == 4);  // version: BCACHE_SB_VERSION_BDEV_WITH_OFFSET
  const uint8_t magic[16] = {0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca,
                             0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81};
  CHECK(std::memcmp(p + 24, magic, 16) == 0);
  CHECK(p[40] == 0x30);
  CHECK(p[55] == 0x3f);  // uuid
  CHECK(p[56] == 0x40);
  CHECK(p[71] == 0x4f);  // set_uuid
  CHECK(std::string(reinterpret_cast<const char*>(p + 72)) == "slow-disk");
  CHECK(LoadLE64(p + 104) == (1 | 2ull << 61 | 1ull << 20));  // flags: writeback, dirty
  CHECK(LoadLE64(p + 112) == 77);                             // seq
  // pad, but for ubcache's dirty_since at 144 (pad[3]: past the feature
  // words newer kernels keep at 120..143), writeback_order at 152 (0 here:
  // flush) and consistent_as_of at 160
  for (size_t i = 120; i < 184; i++)
    if (i < 144 || (i >= 152 && i < 160) || i >= 168) REQUIRE(p[i] == 0);
  CHECK(LoadLE64(p + 144) == 1796400000);
  CHECK(LoadLE64(p + 160) == 1796400042);
  CHECK(LoadLE64(p + 184) == 2048);                           // data_offset
  CHECK(LoadLE16(p + 192) == 8);                              // block_size
  CHECK(LoadLE16(p + 194) == 1024);                           // bucket_size
  CHECK(LoadLE32(p + 200) == 1234567890);                     // last_mount
  CHECK(LoadLE16(p + 204) == 0);                              // first_bucket
  CHECK(LoadLE16(p + 206) == 0);                              // keys
  for (size_t i = 208; i < kSuperblockSize; i++) REQUIRE(p[i] == 0);
  // csum_set(): bch_crc64 from the offset field to the end of d[keys].
  CHECK(LoadLE64(p) == BcacheCrc64(p + 8, 200));
}

TEST_CASE("bch_crc64 is CRC-64/WE: ECMA-182, MSB first, all-ones init and xor") {
  CHECK(BcacheCrc64("123456789", 9) == 0x62ec59e3f1a4f00aull);
  CHECK(BcacheCrc64("", 0) == 0);
}

TEST_CASE("a superblock written by make-bcache -B (bcache-tools 1.0.8) decodes") {
  // The first 208 bytes at 4 KiB of `make-bcache -B` on a 64 MiB file; the
  // rest of the block is zero. Version 1: no data_offset field, data at 16.
  const char* hex =
      "45933f577bb2f2c508000000000000000100000000000000c68573f64e1a45ca8265f57f48ba6d81"
      "562af91d35594ddc84b15c198c3fcaac5a64564f5d1644608feed135b803d5300000000000000000"
      "00000000000000000000000000000000000000000000000000000000000000000000000000000000"
      "00000000000000000000000000000000000000000000000000000000000000000000000000000000"
      "00000000000000000000000000000000000000000000000000000000000000000800000400000000"
      "0000000000000000";
  Block b{};
  for (size_t i = 0; hex[2 * i]; i++) b[i] = static_cast<uint8_t>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16));
  auto sb = DecodeBackingSuperblock(b, 64ull << 20, 512);
  REQUIRE(sb.ok());
  CHECK(sb->csum == 0xc5f2b27b573f9345ull);  // bcache-super-show: "C5F2B27B573F9345 [match]"
  CHECK(sb->version == 1);
  CHECK(FormatUuid(sb->uuid) == "562af91d-3559-4ddc-84b1-5c198c3fcaac");
  CHECK(FormatUuid(sb->set_uuid) == "5a64564f-5d16-4460-8fee-d135b803d530");
  CHECK(sb->label.empty());
  CHECK(sb->data_offset == 16);
  CHECK(sb->block_size == 8);
  CHECK(sb->bucket_size == 1024);
  CHECK(sb->cache_mode == CacheMode::kWritethrough);
  CHECK(sb->state == BackingState::kNone);
  // And we would write the same bytes back.
  CHECK(Encode(*sb) == b);
}

TEST_CASE("backing superblock: each damage is named by the first failed check") {
  struct Case {
    const char* name;
    std::function<void(Block&)> damage;
    Status::Code code;
    std::string message;
  };
  auto reencode = [](std::function<void(BackingSuperblock&)> f) {
    return [f](Block& b) {
      BackingSuperblock sb = SampleBacking();
      f(sb);
      EncodeBackingSuperblock(sb, b);
    };
  };
  auto patch64 = [](size_t off, uint64_t v) {
    return [off, v](Block& b) {
      StoreLE64(b.data() + off, v);
      RefreshBackingCsum(b);
    };
  };
  const Case cases[] = {
      {"one byte of magic", [](Block& b) { b[30] ^= 1; }, Status::Code::kCorruption,
       "superblock: bad magic"},
      {"offset", patch64(8, 16), Status::Code::kCorruption,
       "superblock: bad offset 16 (expected sector 8)"},
      {"bcache cache device, version 0", patch64(16, 0), Status::Code::kNotSupported,
       "superblock: a bcache cache device (version 0), not supported: ubcache caches use their "
       "own format ('ubcache format --cache')"},
      {"bcache cache device, version 3", patch64(16, 3), Status::Code::kNotSupported,
       "superblock: a bcache cache device (version 3), not supported: ubcache caches use their "
       "own format ('ubcache format --cache')"},
      {"version 2", patch64(16, 2), Status::Code::kCorruption,
       "superblock: bad version 2 (this build reads backing versions 1 and 4)"},
      {"keys 257", [](Block& b) { StoreLE16(b.data() + 206, 257); }, Status::Code::kCorruption,
       "superblock: too many journal buckets (keys 257)"},
      {"a label byte", [](Block& b) { b[75] ^= 1; }, Status::Code::kCorruption,
       "superblock: bad csum (stored 0x*"},
      {"a byte inside d[keys]", [](Block& b) {
         StoreLE16(b.data() + 206, 2);
         RefreshBackingCsum(b);
         b[208 + 15] ^= 1;
       },
       Status::Code::kCorruption, "superblock: bad csum (stored 0x*"},
      {"zero uuid", reencode([](auto& s) { s.uuid = {}; }), Status::Code::kCorruption,
       "superblock: uuid is zero"},
      {"block size 3 sectors", reencode([](auto& s) { s.block_size = 3; }),
       Status::Code::kCorruption, "superblock: block size not a power of two (3 sectors)"},
      {"data offset 8", reencode([](auto& s) { s.data_offset = 8; }), Status::Code::kCorruption,
       "superblock: data offset before sector 16 (8)"},
      {"data offset off the block grid", reencode([](auto& s) { s.data_offset = 20; }),
       Status::Code::kCorruption, "superblock: data offset not a multiple of the block size (20 sectors)"},
      {"data offset past the device", reencode([](auto& s) { s.data_offset = 1ull << 40; }),
       Status::Code::kCorruption, "superblock: data offset beyond the end of the device (1099511627776 sectors)"},
      {"cache mode 5", patch64(104, 5), Status::Code::kCorruption, "superblock: bad cache mode 5"},
      {"dirty without a set", reencode([](auto& s) { s.set_uuid = {}; }),
       Status::Code::kCorruption, "superblock: state dirty without a cache set uuid"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    Block b = Encode(SampleBacking());
    c.damage(b);
    auto r = DecodeBackingSuperblock(b, 1ull << 30, 512);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == c.code);
    if (c.message.back() == '*')
      CHECK_THAT(r.status().message(),
                 Catch::StartsWith(c.message.substr(0, c.message.size() - 1)));
    else
      CHECK(r.status().message() == c.message);
  }
}

TEST_CASE("NewBackingSuperblock: detached by default, attached and clean with a set uuid") {
  BackingFormatOptions o;
  o.label = "d0";
  auto sb = NewBackingSuperblock(o, 64ull << 20, 512);
  REQUIRE(sb.ok());
  CHECK(sb->version == 4);
  CHECK(sb->data_offset == 16);
  CHECK(sb->state == BackingState::kNone);
  CHECK(IsZeroUuid(sb->set_uuid));
  o.set_uuid = U(1);
  o.data_offset = 1 << 20;
  sb = NewBackingSuperblock(o, 64ull << 20, 512);
  REQUIRE(sb.ok());
  CHECK(sb->state == BackingState::kClean);
  CHECK(sb->set_uuid == U(1));
  CHECK(sb->data_offset == 2048);
  o.data_offset = 6000;
  CHECK(NewBackingSuperblock(o, 64ull << 20, 512).status().message() ==
        "data offset must be a multiple of 4 KiB, at least 8 KiB (got 6000)");
  o.data_offset = 64ull << 20;
  CHECK(NewBackingSuperblock(o, 64ull << 20, 512).status().message() ==
        "data offset 64 MiB leaves no room for data on 64 MiB");
}

// --- names ------------------------------------------------------------------

TEST_CASE("uuids print as 8-4-4-4-12 hex and parse back, random ones are version 4") {
  Uuid u = U(0xa0);
  CHECK(FormatUuid(u) == "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
  CHECK(ParseUuid(FormatUuid(u)) == u);
  CHECK_FALSE(ParseUuid("a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf0").has_value());
  CHECK_FALSE(ParseUuid("a0a1a2a3xa4a5-a6a7-a8a9-aaabacadaeaf").has_value());
  auto r = RandomUuid();
  REQUIRE(r.ok());
  CHECK((*r)[6] >> 4 == 4);
  CHECK(((*r)[8] & 0xc0) == 0x80);
  CHECK(ParseCacheMode("writearound").value() == CacheMode::kWritearound);
  CHECK_FALSE(ParseCacheMode("writeforward").ok());
}

// --- device helpers ---------------------------------------------------------

TEST_CASE("a blank device probes as none and reads as NotFound") {
  auto reactor = BoundReactor();
  auto dev = Mem("mem:16M");
  auto kind = Probe(*dev);
  REQUIRE(kind.ok());
  CHECK(*kind == SuperblockKind::kNone);
  auto sb = ReadCacheSuperblock(*dev);
  REQUIRE_FALSE(sb.ok());
  CHECK(sb.status().IsNotFound());
  CHECK(sb.status().message() == "mem:16M: no ubcache/bcache superblock");
  CHECK(ReadBackingSuperblock(*dev).status().IsNotFound());
}

TEST_CASE("a device smaller than 8 KiB holds no superblock") {
  auto reactor = BoundReactor();
  auto dev = Mem("mem:4K");
  auto kind = Probe(*dev);
  REQUIRE(kind.ok());
  CHECK(*kind == SuperblockKind::kNone);
  CHECK(ReadCacheSuperblock(*dev).status().IsNotFound());
}

TEST_CASE("a cache superblock written to a device reads back and probes as cache") {
  auto reactor = BoundReactor();
  auto dev = Mem("mem:64M");
  auto made = NewCacheSuperblock({}, dev->size(), dev->logical_block_size());
  REQUIRE(made.ok());
  REQUIRE(WriteCacheSuperblock(*dev, *made).ok());
  CHECK(Probe(*dev).value() == SuperblockKind::kCache);
  auto sb = ReadCacheSuperblock(*dev);
  REQUIRE(sb.ok());
  CHECK(sb->uuid == made->uuid);
  CHECK(sb->nbuckets == 128);
  // Only the 4 KiB at 4 KiB is written.
  AlignedBuffer first(4096);
  REQUIRE(SyncRead(*dev, 0, 4096, first.data()).ok());
  for (size_t i = 0; i < 4096; i++) REQUIRE(first.data()[i] == 0);
  // Reading it as a backing superblock says what it is.
  CHECK(ReadBackingSuperblock(*dev).status().message() ==
        "mem:64M: superblock: a ubcache cache superblock, not a bcache backing superblock");
}

TEST_CASE("a damaged superblock on a device is Corruption naming the device and the check") {
  auto reactor = BoundReactor();
  auto dev = Mem("mem:64M");
  auto made = NewCacheSuperblock({}, dev->size(), dev->logical_block_size());
  REQUIRE(made.ok());
  REQUIRE(WriteCacheSuperblock(*dev, *made).ok());
  AlignedBuffer buf(4096);
  REQUIRE(SyncRead(*dev, 4096, 4096, buf.data()).ok());
  buf.data()[100] ^= 0xff;  // a feature byte, under the checksum
  REQUIRE(SyncWrite(*dev, 4096, 4096, buf.data()).ok());
  CHECK(Probe(*dev).value() == SuperblockKind::kCache);  // the magic still says cache
  auto sb = ReadCacheSuperblock(*dev);
  REQUIRE_FALSE(sb.ok());
  CHECK(sb.status().IsCorruption());
  CHECK_THAT(sb.status().message(), Catch::StartsWith("mem:64M: superblock: bad csum (stored 0x"));

  buf.data()[1] ^= 0x01;  // and now the magic too
  REQUIRE(SyncWrite(*dev, 4096, 4096, buf.data()).ok());
  auto kind = Probe(*dev);
  REQUIRE_FALSE(kind.ok());
  CHECK(kind.status().message() == "mem:64M: superblock: bad magic");
}

TEST_CASE("a superblock the device cannot hold is never written") {
  auto reactor = BoundReactor();
  auto dev = Mem("mem:16M");
  CacheSuperblock sb = SampleCache();  // describes 62.5 MiB
  Status st = WriteCacheSuperblock(*dev, sb);
  CHECK(st.IsCorruption());
  CHECK(st.message() ==
        "mem:16M: superblock: nbuckets does not fit the device (250 x 262144 bytes > 16777216)");
  CHECK(Probe(*dev).value() == SuperblockKind::kNone);
}

TEST_CASE("backing superblocks probe as backing, bcache cache superblocks as bcache-cache") {
  auto reactor = BoundReactor();
  auto dev = Mem("mem:16M");
  BackingSuperblock in = SampleBacking();
  REQUIRE(WriteBackingSuperblock(*dev, in).ok());
  CHECK(Probe(*dev).value() == SuperblockKind::kBacking);
  auto sb = ReadBackingSuperblock(*dev);
  REQUIRE(sb.ok());
  CHECK(sb->label == "slow-disk");
  CHECK(ReadCacheSuperblock(*dev).status().IsInvalidArgument());

  // What make-bcache -C writes: version 3, keys = journal buckets.
  Block b = Encode(in);
  StoreLE64(b.data() + 16, 3);
  RefreshBackingCsum(b);
  AlignedBuffer buf(4096);
  std::memcpy(buf.data(), b.data(), b.size());
  REQUIRE(SyncWrite(*dev, 4096, 4096, buf.data()).ok());
  CHECK(Probe(*dev).value() == SuperblockKind::kBcacheCache);
  auto bad = ReadBackingSuperblock(*dev);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().IsNotSupported());
  CHECK_THAT(bad.status().message(),
             Catch::StartsWith("mem:16M: superblock: a bcache cache device (version 3)"));
}

TEST_CASE("BackingSuper records when the device became dirty, and forgets it once clean or detached") {
  auto reactor = BoundReactor();
  auto dev = Mem("mem:16M");
  BackingSuperblock in = SampleBacking();
  in.state = BackingState::kClean;
  in.dirty_since = 0;
  REQUIRE(WriteBackingSuperblock(*dev, in).ok());
  BackingSuper super(dev.get(), ReadBackingSuperblock(*dev).value());

  uint64_t before = static_cast<uint64_t>(std::time(nullptr));
  REQUIRE(super.MarkDirty().ok());
  uint64_t after = static_cast<uint64_t>(std::time(nullptr));
  auto sb = ReadBackingSuperblock(*dev);  // what is durable, not the cached copy
  REQUIRE(sb.ok());
  CHECK(sb->state == BackingState::kDirty);
  CHECK(sb->dirty_since >= before);
  CHECK(sb->dirty_since <= after);
  uint64_t since = sb->dirty_since;

  // Dirty again (another first dirty write after a restart): the time of
  // the first one stands — the device has held nothing newer since then.
  REQUIRE(super.MarkDirty().ok());
  CHECK(ReadBackingSuperblock(*dev)->dirty_since == since);

  REQUIRE(super.MarkClean().ok());
  sb = ReadBackingSuperblock(*dev);
  CHECK(sb->state == BackingState::kClean);
  CHECK(sb->dirty_since == 0);

  REQUIRE(super.MarkDirty().ok());
  REQUIRE(super.Detach().ok());  // forget-cache: dirty data given up
  sb = ReadBackingSuperblock(*dev);
  CHECK(sb->state == BackingState::kNone);
  CHECK(sb->dirty_since == 0);
}

TEST_CASE("BackingSuper: consistent_as_of starts at dirty_since, only moves forward, only in flush order") {
  auto reactor = BoundReactor();
  auto dev = Mem("mem:16M");
  BackingSuperblock in = SampleBacking();
  in.state = BackingState::kClean;
  in.dirty_since = 0;
  in.consistent_as_of = 0;
  REQUIRE(WriteBackingSuperblock(*dev, in).ok());
  BackingSuper super(dev.get(), ReadBackingSuperblock(*dev).value());
  REQUIRE(super.RecordConsistentAsOf(5, super.lba_switches()).ok());  // clean: nothing to promise
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == 0);

  REQUIRE(super.MarkDirty().ok());
  auto sb = ReadBackingSuperblock(*dev);
  CHECK(sb->consistent_as_of == sb->dirty_since);  // everything before it is there
  const uint64_t t = sb->dirty_since;
  REQUIRE(super.RecordConsistentAsOf(t + 10, super.lba_switches()).ok());
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == t + 10);
  const uint64_t seq = ReadBackingSuperblock(*dev)->seq;
  REQUIRE(super.RecordConsistentAsOf(t + 3, super.lba_switches()).ok());  // never back
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == t + 10);
  CHECK(ReadBackingSuperblock(*dev)->seq == seq);  // and not written
  // lba order: no promise, durably; back to flush: still none until the
  // writeback thread records one.
  REQUIRE(super.SetWritebackOrder(WritebackOrder::kLba).ok());
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == 0);
  REQUIRE(super.RecordConsistentAsOf(t + 20, super.lba_switches()).ok());
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == 0);
  REQUIRE(super.SetWritebackOrder(WritebackOrder::kFlush).ok());
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == 0);
  REQUIRE(super.RecordConsistentAsOf(t + 30, super.lba_switches()).ok());
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == t + 30);
  // A time decided before a stretch of lba order (now over) is not recorded:
  // a write in lba order may have overtaken older epochs meanwhile.
  const uint64_t seen = super.lba_switches();
  REQUIRE(super.SetWritebackOrder(WritebackOrder::kLba).ok());
  REQUIRE(super.SetWritebackOrder(WritebackOrder::kFlush).ok());
  REQUIRE(super.RecordConsistentAsOf(t + 40, seen).ok());
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == 0);
  REQUIRE(super.MarkClean().ok());
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == 0);
  // Dirty in lba order: no promise from the start.
  REQUIRE(super.SetWritebackOrder(WritebackOrder::kLba).ok());
  REQUIRE(super.MarkDirty().ok());
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == 0);
  REQUIRE(super.Detach().ok());
  CHECK(ReadBackingSuperblock(*dev)->consistent_as_of == 0);
}

