// SPDX-License-Identifier: Apache-2.0
// Writeback's ordering rules, each on devices that drop every write not yet
// flushed when the power goes (FaultDevice drop_unflushed), so that a rule
// broken is data lost here:
//  - data on the cache device, then the journal entry that finds it, then
//    the acknowledgement of the FLUSH (or of a FUA write);
//  - the backing device flushed before writeback marks data clean;
//  - a reclaimed bucket's new generation durable before the bucket is reused;
//  - the backing superblock durably dirty before the first dirty ack.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "backend/fault_device.h"
#include "backend/mem_device.h"
#include "backend/offset_device.h"
#include "backend/sync_io.h"
#include "cache/backing_super.h"
#include "cache/cache_set.h"
#include "cache/cached_device.h"
#include "cache/superblock.h"
#include "util/aligned_buffer.h"
#include "util/clock.h"

namespace ubcache {
namespace {

constexpr uint64_t kBlock = 4096;

std::vector<uint8_t> Pattern(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

// A formatted cache and a formatted backing device, each a RAM device under
// a fault layer that drops unflushed writes at PowerCut().
struct Rig {
  std::unique_ptr<Reactor> reactor;
  std::unique_ptr<FaultDevice> cache, raw_backing;
  BlockDevice* cache_media = nullptr;  // below the cache's fault layer
  std::unique_ptr<OffsetDevice> backing;
  std::unique_ptr<BackingSuper> super;
  std::unique_ptr<CacheSet> set;
  std::unique_ptr<CachedDevice> dev;

  explicit Rig(uint64_t cache_size = 32 << 20, uint64_t backing_size = 64 << 20, uint64_t journal_buckets = 0) {
    reactor = std::move(Reactor::Create().value());
    reactor->Bind();
    FaultConfig fc;
    fc.drop_unflushed = true;
    auto media = std::move(MemDevice::Create("mem:c", cache_size).value());
    cache_media = media.get();
    cache = std::make_unique<FaultDevice>("fault:cache", std::move(media), fc);
    raw_backing =
        std::make_unique<FaultDevice>("fault:backing", std::move(MemDevice::Create("mem:b", backing_size).value()), fc);
    CacheFormatOptions co;
    co.bucket_size = 64 << 10;
    co.journal_buckets = journal_buckets;
    auto csb = NewCacheSuperblock(co, cache->size(), cache->logical_block_size());
    REQUIRE(csb.ok());
    REQUIRE(WriteCacheSuperblock(*cache, *csb).ok());
    BackingFormatOptions bo;
    auto bsb = NewBackingSuperblock(bo, raw_backing->size(), raw_backing->logical_block_size());
    REQUIRE(bsb.ok());
    REQUIRE(WriteBackingSuperblock(*raw_backing, *bsb).ok());
    backing = std::make_unique<OffsetDevice>(raw_backing.get(), bsb->data_offset_bytes());
    Start();
  }
  ~Rig() { Drop(); }

  // What serve does: open the set, attach, number the device, checkpoint.
  void Start() {
    auto csb = ReadCacheSuperblock(*cache);
    REQUIRE(csb.ok());
    CacheSet::Options o;
    auto s = CacheSet::Open(cache.get(), *csb, o);
    REQUIRE(s.ok());
    set = std::move(s).value();
    auto bsb = ReadBackingSuperblock(*raw_backing);
    REQUIRE(bsb.ok());
    super = std::make_unique<BackingSuper>(raw_backing.get(), *bsb);
    bool attached = bsb->set_uuid == set->set_uuid() && bsb->state != BackingState::kNone;
    if (!attached) REQUIRE(super->Attach(set->set_uuid()).ok());
    set->knobs().cache_mode = CacheMode::kWriteback;
    set->knobs().writeback_running = false;  // the tests decide when data is written back
    set->knobs().sequential_cutoff = 0;
    set->knobs().congested_read_threshold_us = 0;
    set->knobs().congested_write_threshold_us = 0;
    dev = std::make_unique<CachedDevice>("backing", set.get(), set->DeviceNumber(bsb->uuid, attached),
                                         backing.get(), super.get());
    REQUIRE(dev->can_writeback());
    Status cst = set->Checkpoint();
    auto u = set->buckets().usage();
    INFO(cst.ToString() << " free " << u.free << " data " << u.data << " metadata " << u.metadata);
    REQUIRE(cst.ok());
  }
  void Drop() {
    dev.reset();
    set.reset();  // no Shutdown: a crash
    super.reset();
  }
  // kill -9: the daemon dies and nothing more reaches either device (its
  // destructors would still commit: the devices refuse every write by then),
  // but they keep everything they were given.
  void Crash() {
    FaultConfig cc = cache->config(), bc = raw_backing->config();
    for (FaultDevice* d : {cache.get(), raw_backing.get()}) {
      FaultConfig dead = d->config();
      dead.eio_probability = 1;
      dead.eio_reads = false;
      d->SetConfig(dead);
    }
    Drop();
    cache->SetConfig(cc);
    raw_backing->SetConfig(bc);
    Start();
  }
  // The power goes: both devices lose what was not flushed, the daemon dies.
  void PowerCut() {
    Drop();
    cache->PowerLoss();
    raw_backing->PowerLoss();
    Start();
  }
  // The same, but the cut comes first: PowerCut lets the dying set make its
  // pending index changes durable (stopping the journal thread runs one more
  // commit), which a power cut or kill -9 never does. Here no write reaches
  // the cache media from the cut on, so what was not committed is lost.
  void CutNow() {
    FaultConfig live = cache->config();
    FaultConfig dead = live;
    dead.eio_probability = 1;  // writes only: reads stay good
    dead.eio_reads = false;
    cache->SetConfig(dead);
    cache->PowerLoss();
    raw_backing->PowerLoss();
    Drop();
    cache->PowerLoss();
    raw_backing->PowerLoss();
    cache->SetConfig(live);
    Start();
  }
  void Write(uint64_t off, uint64_t len, uint64_t seed, uint32_t flags = 0) {
    auto p = Pattern(len, seed);
    AlignedBuffer b(len);
    std::copy(p.begin(), p.end(), b.data());
    Status st = SyncWrite(*dev, off, len, b.data(), flags);
    INFO("write " << off << "+" << len << ": " << st.ToString());
    REQUIRE(st.ok());
  }
  std::vector<uint8_t> Read(BlockDevice& d, uint64_t off, uint64_t len) {
    AlignedBuffer b(len);
    Status st = SyncRead(d, off, len, b.data());
    INFO(st.ToString());
    REQUIRE(st.ok());
    return std::vector<uint8_t>(b.data(), b.data() + len);
  }
};

TEST_CASE("writeback: every write acknowledged before a FLUSH survives a power cut of both devices") {
  Rig r;
  for (uint64_t i = 0; i < 64; i++) r.Write(i * 3 * kBlock, kBlock, i);
  REQUIRE(SyncFlush(*r.dev).ok());
  for (uint64_t i = 0; i < 64; i++) r.Write(i * 3 * kBlock + kBlock, kBlock, 1000 + i);  // never flushed
  CHECK(r.dev->dirty_bytes() >= 64 * kBlock);
  r.PowerCut();
  CHECK(r.set->warm());
  CHECK(r.dev->dirty_bytes() >= 64 * kBlock);
  CHECK(r.super->state() == BackingState::kDirty);
  for (uint64_t i = 0; i < 64; i++) {
    INFO("block " << i);
    CHECK(r.Read(*r.dev, i * 3 * kBlock, kBlock) == Pattern(kBlock, i));
  }
  // Nothing of it reached the backing device: it was all writeback.
  CHECK(r.Read(*r.backing, 0, kBlock) == std::vector<uint8_t>(kBlock, 0));
}

TEST_CASE("writeback: every acknowledged write survives a crash of the daemon, with no FLUSH") {
  // kill -9, or a ublk recovery: the devices keep everything they were given
  // (nothing is lost but the daemon's memory), and a client carries on
  // without a power cycle, so no acknowledged write may revert.
  Rig r;
  r.set->knobs().journal_delay_ms = 60000;  // no timed commit: only the acknowledgement's own
  for (uint64_t i = 0; i < 64; i++) r.Write(i * 2 * kBlock, kBlock, i);
  r.Crash();
  CHECK(r.dev->dirty_bytes() == 64 * kBlock);
  for (uint64_t i = 0; i < 64; i++) {
    INFO("block " << i);
    CHECK(r.Read(*r.dev, i * 2 * kBlock, kBlock) == Pattern(kBlock, i));
  }
}

TEST_CASE("writeback: a power cut that keeps an acknowledged write's journal entry but not its data replays up to it") {
  Rig r;
  r.set->knobs().journal_delay_ms = 60000;
  r.Write(0, kBlock, 1);
  r.Write(4 * kBlock, kBlock, 2);
  REQUIRE(SyncFlush(*r.dev).ok());
  r.Write(0, kBlock, 3);           // soft: acknowledged, not flushed
  r.Write(8 * kBlock, kBlock, 4);  // after it
  std::vector<Extent> now;
  REQUIRE(r.set->index().Lookup(r.dev->dev_index(), 0, kBlock, &now).ok());
  REQUIRE(now.size() == 1);
  const uint64_t lost = now[0].cache_offset;
  // What the device was given, as the fault layer shows it; then the cut,
  // after which every unflushed block reaches the media except the data of
  // the first soft write: its journal entry landed, its data did not.
  std::vector<uint8_t> given = r.Read(*r.cache, 0, r.cache->size());
  r.Drop();
  r.cache->PowerLoss();
  r.raw_backing->PowerLoss();
  std::vector<uint8_t> media = r.Read(*r.cache_media, 0, r.cache->size());
  uint64_t landed = 0;
  for (uint64_t off = 0; off < given.size(); off += kBlock) {
    if (off == lost || std::equal(given.begin() + off, given.begin() + off + kBlock, media.begin() + off))
      continue;
    REQUIRE(SyncWrite(*r.cache_media, off, kBlock, given.data() + off).ok());
    landed++;
  }
  CHECK(landed >= 2);  // at least the other write's data and the journal records
  r.Start();
  CHECK(r.Read(*r.dev, 0, kBlock) == Pattern(kBlock, 1));  // the durable write, not what the cut tore
  CHECK(r.Read(*r.dev, 4 * kBlock, kBlock) == Pattern(kBlock, 2));
  // Replay ended at the entry whose data failed its check: the later write
  // (unflushed, so allowed) is gone too, rather than trusted past a gap.
  CHECK(r.Read(*r.dev, 8 * kBlock, kBlock) == std::vector<uint8_t>(kBlock, 0));
}

// Rule 1 (Journal::WriteRecord's PREFLUSH before a hard record's FUA
// write): fails with that flush taken out — the record lands, the data it
// points at does not, and replay trusts a hard record without a check.
TEST_CASE("writeback: a FUA write survives a power cut with no FLUSH") {
  Rig r;
  r.Write(8 * kBlock, 2 * kBlock, 7, kIoFua);
  r.PowerCut();
  CHECK(r.Read(*r.dev, 8 * kBlock, 2 * kBlock) == Pattern(2 * kBlock, 7));
}

TEST_CASE("writeback: a failed cache read of hits holding dirty data fails the read, never returns stale data") {
  Rig r;
  r.Read(*r.dev, 0, 16 * kBlock);       // clean pieces,
  r.Write(16 * kBlock, 4 * kBlock, 7);  // and dirty ones after them
  FaultConfig fc = r.cache->config();
  FaultConfig bad = fc;
  bad.eio_probability = 1;
  bad.eio_writes = false;
  r.cache->SetConfig(bad);
  AlignedBuffer b(20 * kBlock);
  CHECK_FALSE(SyncRead(*r.dev, 0, b.size(), b.data()).ok());
  r.cache->SetConfig(fc);
  CHECK(r.Read(*r.dev, 16 * kBlock, 4 * kBlock) == Pattern(4 * kBlock, 7));
}

TEST_CASE("writeback: the backing superblock is durably dirty before the first dirty write is acknowledged") {
  Rig r;
  REQUIRE(r.super->state() != BackingState::kDirty);
  r.Write(8 * kBlock, 2 * kBlock, 7, kIoFua);  // acknowledged: durable, and so must `dirty` be
  r.CutNow();
  // Else a start would take the backing device for clean (usable alone)
  // while the cache holds the only copy of an acknowledged write.
  CHECK(r.super->state() == BackingState::kDirty);
  CHECK(r.dev->dirty_bytes() == 2 * kBlock);
  CHECK(r.Read(*r.dev, 8 * kBlock, 2 * kBlock) == Pattern(2 * kBlock, 7));
}

TEST_CASE("writeback: FUA writes are cached past the sequential cutoff, plain ones bypass (bcache's sync rule)") {
  Rig r;
  r.set->knobs().sequential_cutoff = 64 * kBlock;
  r.set->knobs().writeback_order = WritebackOrder::kLba;  // bcache's rule, unordered
  // Two streams of 128 blocks, one FUA, one plain: the plain one bypasses
  // past its first 64 blocks; the FUA one is all dirty in the cache.
  for (uint64_t i = 0; i < 128; i++) r.Write((1024 + i) * kBlock, kBlock, i, kIoFua);
  CHECK(r.dev->dirty_bytes() == 128 * kBlock);
  CHECK(r.dev->sequential_bypasses() == 0);
  for (uint64_t i = 0; i < 128; i++) r.Write((4096 + i) * kBlock, kBlock, i);
  CHECK(r.dev->sequential_bypasses() >= 60);
  CHECK(r.dev->dirty_bytes() <= (128 + 70) * kBlock);
  for (uint64_t i = 0; i < 128; i += 17) {
    CHECK(r.Read(*r.dev, (1024 + i) * kBlock, kBlock) == Pattern(kBlock, i));
    CHECK(r.Read(*r.dev, (4096 + i) * kBlock, kBlock) == Pattern(kBlock, i));
  }
  // writeback_order flush (rule 14): while dirty data waits for writeback,
  // a bypassed write would overtake it on the backing device; it is cached.
  r.set->knobs().writeback_order = WritebackOrder::kFlush;
  uint64_t dirty = r.dev->dirty_bytes();
  for (uint64_t i = 0; i < 128; i++) r.Write((8192 + i) * kBlock, kBlock, i);
  CHECK(r.dev->dirty_bytes() == dirty + 128 * kBlock);
}

TEST_CASE("bypass counters: requests sent around the cache, by operation and sync hint (FUA, after a FLUSH)") {
  // Writethrough: the sync rule is writeback's, so every kind bypasses here.
  Rig r;
  r.set->knobs().cache_mode = CacheMode::kWritethrough;
  r.set->knobs().sequential_cutoff = 16 * kBlock;
  for (uint64_t i = 0; i < 32; i++) r.Write((1024 + i) * kBlock, kBlock, i);
  for (uint64_t i = 0; i < 32; i++) r.Write((2048 + i) * kBlock, kBlock, i, kIoFua);
  for (uint64_t i = 0; i < 32; i++) {
    REQUIRE(SyncFlush(*r.dev).ok());
    r.Write((3072 + i) * kBlock, kBlock, i);  // the first write after a FLUSH
  }
  for (uint64_t i = 0; i < 32; i++) r.Read(*r.dev, (4096 + i) * kBlock, kBlock);
  // Each stream bypasses from the request its run reaches 16 blocks on.
  CHECK(r.dev->bypasses(BypassPolicy::kWrite) == 17);
  CHECK(r.dev->bypasses(BypassPolicy::kWriteFua) == 17);
  CHECK(r.dev->bypasses(BypassPolicy::kWriteAfterFlush) == 17);
  CHECK(r.dev->bypasses(BypassPolicy::kRead) == 17);
  CHECK(r.dev->sequential_bypasses() == 4 * 17);
}

// Writes of `n` blocks from block `first`, all submitted at once after a
// FLUSH that is still in flight when they arrive.
static void WritesBehindFlush(Rig& r, uint64_t first, uint64_t n) {
  int pending = 1;
  bool ok = true;
  std::vector<std::vector<uint8_t>> data;
  for (uint64_t i = 0; i < n; i++) data.push_back(Pattern(kBlock, first + i));
  std::vector<AlignedBuffer> bufs;
  auto done = [&](Status st) {
    ok &= st.ok();
    pending--;
  };
  r.dev->Flush(done);
  for (uint64_t i = 0; i < n; i++) {
    bufs.emplace_back(kBlock);
    std::copy(data[i].begin(), data[i].end(), bufs.back().data());
  }
  for (uint64_t i = 0; i < n; i++) {
    pending++;
    r.dev->Write((first + i) * kBlock, kBlock, bufs[i].data(), 0, done);
  }
  while (pending > 0) r.reactor->RunOnce(true);
  REQUIRE(ok);
}

TEST_CASE("writeback: writes right after a FLUSH, or while one is in flight, are cached past the cutoff "
          "(the sync hint a loop device or nbdfuse leaves of a journal commit)") {
  Rig r;
  r.Write(0, kBlock, 1);  // the backing superblock goes dirty first
  REQUIRE(SyncFlush(*r.dev).ok());
  r.set->knobs().sequential_cutoff = 16 * kBlock;
  for (uint64_t i = 0; i < 64; i++) {
    REQUIRE(SyncFlush(*r.dev).ok());
    r.Write((1024 + i) * kBlock, kBlock, i);
  }
  WritesBehindFlush(r, 2048, 64);
  CHECK(r.dev->sequential_bypasses() == 0);
  CHECK(r.dev->bypasses(BypassPolicy::kWriteAfterFlush) == 0);
  CHECK(r.dev->dirty_bytes() == (1 + 64 + 64) * kBlock);
  // A plain stream, after the FLUSH's first write, bypasses as before.
  for (uint64_t i = 0; i < 64; i++) r.Write((4096 + i) * kBlock, kBlock, i);
  CHECK(r.dev->bypasses(BypassPolicy::kWrite) >= 40);
  for (uint64_t i = 0; i < 64; i += 7) {
    CHECK(r.Read(*r.dev, (1024 + i) * kBlock, kBlock) == Pattern(kBlock, i));
    CHECK(r.Read(*r.dev, (2048 + i) * kBlock, kBlock) == Pattern(kBlock, 2048 + i));
  }
}

TEST_CASE("writeback as shipped: a FUA or after-FLUSH write is cached even while the cache device is measured "
          "slower than the backing device") {
  Rig r;
  // The bypass rule itself: in writeback_order flush a plain bypassed
  // write is absorbed while dirty data waits (rule 14; the FUA test above).
  r.set->knobs().writeback_order = WritebackOrder::kLba;
  r.Write(0, kBlock, 1);
  REQUIRE(SyncFlush(*r.dev).ok());
  r.set->knobs().sequential_cutoff = kAutoCutoff;
  // The backing device's writes measured (RAM: microseconds), through,
  // with congestion off: both devices are RAM, and on a loaded machine the
  // cache's real writes can measure slower than the backing's for a while.
  r.set->knobs().congested_write_threshold_us = 0;
  r.set->knobs().cache_mode = CacheMode::kWritethrough;
  for (uint64_t i = 0; i < 2 * kMinSamples; i++) r.Write((512 + 2 * i) * kBlock, kBlock, i);
  r.set->knobs().cache_mode = CacheMode::kWriteback;
  r.set->knobs().congested_write_threshold_us = kAutoThresholdUs;
  CHECK(r.dev->auto_congested_bypasses() == 0);
  REQUIRE(r.dev->backing_time().Samples(ServiceTime::Op::kWrite, 0) >= kMinSamples);
  auto slow_cache = [&] {
    for (int i = 0; i < 32; i++) r.set->cache_time().Observe(ServiceTime::Op::kWrite, kBlock, 20'000'000, NowNanos());
  };
  slow_cache();
  r.Write(1024 * kBlock, kBlock, 5);  // plain: around the cache
  CHECK(r.dev->auto_congested_bypasses() == 1);
  CHECK(r.dev->bypasses(BypassPolicy::kWrite) == 1);
  slow_cache();
  r.Write(1026 * kBlock, kBlock, 6, kIoFua);
  slow_cache();
  REQUIRE(SyncFlush(*r.dev).ok());
  r.Write(1028 * kBlock, kBlock, 7);
  CHECK(r.dev->bypasses(BypassPolicy::kWriteFua) == 0);
  CHECK(r.dev->bypasses(BypassPolicy::kWriteAfterFlush) == 0);
  CHECK(r.dev->auto_congested_bypasses() == 1);
  CHECK(r.dev->dirty_bytes() == 3 * kBlock);
}

TEST_CASE("writeback: data is marked clean only once the backing device has flushed it") {
  Rig r;
  for (uint64_t i = 0; i < 32; i++) r.Write(i * 16 * kBlock, 4 * kBlock, i);
  REQUIRE(SyncFlush(*r.dev).ok());
  std::vector<std::string> progress;
  REQUIRE(r.dev->writeback()->Drain([&](const std::string& s) { progress.push_back(s); }).ok());
  CHECK(!progress.empty());
  CHECK(r.dev->dirty_bytes() == 0);
  CHECK(r.super->state() == BackingState::kClean);
  {
    auto u = r.set->buckets().usage();
    INFO("free " << u.free << " data " << u.data << " metadata " << u.metadata << " dirty_buckets "
                 << r.set->buckets().dirty_buckets());
    Status fst = SyncFlush(*r.dev);
    INFO(fst.ToString());
    REQUIRE(fst.ok());  // commits the clean marks
  }
  r.PowerCut();
  CHECK(r.dev->dirty_bytes() == 0);
  CHECK(r.super->state() == BackingState::kClean);
  // The backing device alone has every byte: clean meant durable there.
  for (uint64_t i = 0; i < 32; i++) {
    INFO("block " << i);
    CHECK(r.Read(*r.backing, i * 16 * kBlock, 4 * kBlock) == Pattern(4 * kBlock, i));
  }
}

TEST_CASE("writeback: writeback_written counts what the backing device took, though clients rewrote it before "
          "it could be marked clean") {
  Rig r;
  for (uint64_t i = 0; i < 16; i++) r.Write(i * kBlock, kBlock, i);
  // Backing writes and flushes take 200 ms: every block is rewritten
  // between its writeback write and the flush that would mark it clean.
  FaultConfig slow = r.raw_backing->config();
  slow.latency_us = 200'000;
  r.raw_backing->SetConfig(slow);
  r.set->knobs().writeback_percent = 0;
  r.set->knobs().writeback_delay = 1;
  r.set->knobs().writeback_running = true;
  r.dev->writeback()->Kick();
  uint64_t seed = 100;
  for (const uint64_t until = NowNanos() + 3'000'000'000ull; NowNanos() < until;) {
    for (uint64_t i = 0; i < 16; i++) r.Write(i * kBlock, kBlock, seed++);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.set->knobs().writeback_running = false;
  CHECK(r.dev->writeback()->written_bytes() >= 16 * kBlock);
  CHECK(r.dev->dirty_bytes() == 16 * kBlock);  // still: nothing it wrote was marked clean
}

// Rule 8 (BackingDurability::WriteDone, FlushForClient): fails with the
// write-through engine's WriteDone() taken out — the FLUSH skips the
// backing device, and the cut loses the write it acknowledged.
TEST_CASE("writeback: a FLUSH flushes the backing device only when a client write reached it since its last flush") {
  Rig r;
  // bcache's order: in flush order the cutoff write below waits for
  // writeback of the older epochs, and the writeback thread's own backing
  // writes (its clean superblock among them) race the counts checked here.
  r.set->knobs().writeback_order = WritebackOrder::kLba;
  r.Write(0, kBlock, 1);  // marks the backing superblock dirty first
  REQUIRE(SyncFlush(*r.dev).ok());
  CHECK(r.raw_backing->unflushed_bytes() == 0);
  // Below the cache, unflushed, as writeback leaves what it writes until its
  // own flush: only a backing flush would make it durable.
  auto other = Pattern(kBlock, 99);
  AlignedBuffer b(kBlock);
  std::copy(other.begin(), other.end(), b.data());
  REQUIRE(SyncWrite(*r.backing, 200 * kBlock, kBlock, b.data(), 0).ok());
  r.Write(8 * kBlock, kBlock, 2);  // writeback: the cache alone
  REQUIRE(SyncFlush(*r.dev).ok());
  CHECK(r.raw_backing->unflushed_bytes() == kBlock);  // no client write reached it: not flushed
  // Dirty data past the cutoff: the next write goes through to the backing
  // device, and the FLUSH after it flushes the backing device.
  r.set->knobs().cutoff_writeback = 0;
  r.set->knobs().cutoff_writeback_sync = 0;
  r.Write(16 * kBlock, kBlock, 3);
  CHECK(r.dev->cutoff_writethroughs() == 1);
  CHECK(r.raw_backing->unflushed_bytes() >= kBlock);
  REQUIRE(SyncFlush(*r.dev).ok());
  CHECK(r.raw_backing->unflushed_bytes() == 0);
  r.PowerCut();
  CHECK(r.Read(*r.dev, 0, kBlock) == Pattern(kBlock, 1));
  CHECK(r.Read(*r.dev, 8 * kBlock, kBlock) == Pattern(kBlock, 2));
  CHECK(r.Read(*r.dev, 16 * kBlock, kBlock) == Pattern(kBlock, 3));
  CHECK(r.Read(*r.backing, 16 * kBlock, kBlock) == Pattern(kBlock, 3));
}

// Rule 4 (BucketAllocator's gen persister, CacheSet::PersistGens): fails
// with PersistGens returning OK without journaling anything — A's pointers
// into its reused buckets replay as valid and read B's data. B stays small
// enough that no checkpoint comes between (one would save the new gens in
// its bucket table, and the test passed even so when B was 4x the cache).
// Moving GC's half (its moves committed before the source buckets are
// unpinned) is not covered here.
TEST_CASE("writeback: a reclaimed bucket's generation is durable before the bucket is reused") {
  Rig r(16 << 20, 128 << 20);
  r.set->knobs().cache_mode = CacheMode::kWritethrough;
  // Range A cached, checkpointed (its pointers, and its buckets' gens in
  // the table), then range B, 1.5x the cache, which reclaims and reuses
  // buckets A's extents point into.
  const uint64_t kChunk = 64 << 10, a_len = 8 << 20, b_off = 32 << 20, b_len = 24 << 20;
  for (uint64_t off = 0; off < a_len; off += kChunk) r.Write(off, kChunk, off);
  REQUIRE(SyncFlush(*r.dev).ok());
  REQUIRE(r.set->Checkpoint().ok());
  auto reclaimed = [&r] {
    auto u = r.set->buckets().usage();
    return u.reclaimed_background + u.reclaimed_foreground;
  };
  const uint64_t before = reclaimed();
  for (uint64_t off = 0; off < b_len; off += kChunk) r.Write(b_off + off, kChunk, 1 << 30 | off);
  REQUIRE(SyncFlush(*r.dev).ok());
  REQUIRE(reclaimed() > before);
  r.PowerCut();
  // A replayed pointer into a reused bucket must be stale: A reads A.
  for (uint64_t off = 0; off < a_len; off += kChunk) {
    INFO("offset " << off);
    REQUIRE(r.Read(*r.dev, off, kChunk) == Pattern(kChunk, off));
  }
}

// Rule 5, clean copies (RangeGuard::AfterCleanCopiesGone in
// BeforeBackingWrite): fails with the backing write issued at once instead.
TEST_CASE("writethrough: a clean copy never outlives backing data newer than it across a power cut") {
  Rig r;
  r.set->knobs().cache_mode = CacheMode::kWritethrough;
  // Only the commits the I/O path asks for: the journal thread's timer would
  // hide the window this looks at. Its wait under the old delay ends first.
  r.set->knobs().journal_delay_ms = 10000;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  r.Write(0, kBlock, 1);
  REQUIRE(SyncFlush(*r.dev).ok());  // X: on the backing media, cached clean, journaled
  // X's bucket goes into the table with its priority, so the restart's first
  // reclaim (which takes the empty, priority-0 buckets) leaves it alone.
  REQUIRE(r.set->Checkpoint().ok());
  r.Write(0, kBlock, 2);            // W, never flushed: X's clean copy is dropped
  // A torn power cut may keep W's backing copy (tear_unflushed: each 4 KiB
  // written through at once, or lost); here it does, and nothing else.
  REQUIRE(SyncFlush(*r.raw_backing).ok());
  r.CutNow();
  REQUIRE(r.Read(*r.backing, 0, kBlock) == Pattern(kBlock, 2));
  // X's clean copy recovered would read X now, and W again once its bucket
  // is reclaimed: a write read back as lost, then back (the crash harness's
  // CRASH_NARROW rule, tests/integration/121).
  CHECK(r.Read(*r.dev, 0, kBlock) == Pattern(kBlock, 2));
}

// Rule 5 on writeback's roads to the backing device: the router leaves clean
// copies in place (a write the cache takes replaces them with its insert),
// so a write the cutoff turns away removes them itself, committed, before
// its backing write (WriteThroughEngine::Write -> BeforeBackingWrite). Fails
// with the backing write issued at once: X's clean copy is recovered.
TEST_CASE("writeback: a write the cutoff sends to the backing device leaves no clean copy older than it across a power cut") {
  Rig r;
  r.set->knobs().cache_mode = CacheMode::kWritethrough;
  r.set->knobs().writeback_order = WritebackOrder::kLba;  // the write goes through at once
  r.set->knobs().journal_delay_ms = 10000;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  r.Write(0, kBlock, 1);
  REQUIRE(SyncFlush(*r.dev).ok());  // X: on the backing media, cached clean, journaled
  REQUIRE(r.set->Checkpoint().ok());
  r.set->knobs().cache_mode = CacheMode::kWriteback;
  r.set->knobs().cutoff_writeback = 0;
  r.set->knobs().cutoff_writeback_sync = 0;
  r.Write(0, kBlock, 2);  // W: turned away by the cutoff, never flushed
  CHECK(r.dev->cutoff_writethroughs() == 1);
  CHECK(r.dev->dirty_bytes() == 0);
  REQUIRE(SyncFlush(*r.raw_backing).ok());  // the torn cut keeps W's backing copy
  r.CutNow();
  REQUIRE(r.Read(*r.backing, 0, kBlock) == Pattern(kBlock, 2));
  CHECK(r.Read(*r.dev, 0, kBlock) == Pattern(kBlock, 2));
}

// A write the cache takes over a clean copy replaces it with its insert (no
// removal first): the range reads the new data, and after a power cut that
// follows a FLUSH, the new data again — never the old clean copy.
TEST_CASE("writeback: a write taken dirty over a clean copy replaces it, across a power cut") {
  Rig r;
  r.set->knobs().cache_mode = CacheMode::kWritethrough;
  for (uint64_t i = 0; i < 16; i++) r.Write(i * kBlock, kBlock, i);
  r.Write(32 * kBlock, 4 * kBlock, 77);  // one clean extent of 4 blocks
  REQUIRE(SyncFlush(*r.dev).ok());
  REQUIRE(r.set->Checkpoint().ok());
  r.set->knobs().cache_mode = CacheMode::kWriteback;
  for (uint64_t i = 0; i < 16; i += 2) r.Write(i * kBlock, kBlock, 100 + i);  // exactly over each
  r.Write(33 * kBlock, kBlock, 200);  // inside the 4-block extent: splits it
  CHECK(r.dev->dirty_bytes() == 9 * kBlock);
  for (uint64_t i = 0; i < 16; i++) CHECK(r.Read(*r.dev, i * kBlock, kBlock) == Pattern(kBlock, i % 2 ? i : 100 + i));
  auto big = Pattern(4 * kBlock, 77);
  std::vector<uint8_t> want(big.begin(), big.end());
  auto mid = Pattern(kBlock, 200);
  std::copy(mid.begin(), mid.end(), want.begin() + kBlock);
  CHECK(r.Read(*r.dev, 32 * kBlock, 4 * kBlock) == want);
  REQUIRE(SyncFlush(*r.dev).ok());
  r.CutNow();
  for (uint64_t i = 0; i < 16; i++) CHECK(r.Read(*r.dev, i * kBlock, kBlock) == Pattern(kBlock, i % 2 ? i : 100 + i));
  CHECK(r.Read(*r.dev, 32 * kBlock, 4 * kBlock) == want);
  CHECK(r.dev->dirty_bytes() == 9 * kBlock);
}

// Ordering rule 9 (doc/design.md): a clean copy is never more durable than
// the backing data it mirrors. Checked to fail without the rule: with
// BackingDurability::Provisional returning false (every clean insert
// journaled as durable) the next test reads W in both cases, and with
// CacheSet::FlushBackingsForCheckpoint doing nothing the checkpoint test
// reads W from the cache over the backing media's X.
namespace {
// A write-through rig whose journal commits only when asked: the timer
// would hide the windows these tests look at (its wait under the old delay
// ends first).
void QuietJournal(Rig& r, CacheMode mode) {
  r.set->knobs().cache_mode = mode;
  r.set->knobs().journal_delay_ms = 10000;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}
bool Cached(Rig& r, uint64_t off) {
  std::vector<Extent> found;
  REQUIRE(r.set->index().Lookup(r.dev->dev_index(), off, kBlock, &found).ok());
  return !found.empty();
}
// A read miss answers the client before its fill's cache write completes:
// lets the fill land (or be refused).
bool FillLanded(Rig& r, uint64_t off) {
  for (int i = 0; i < 200 && !Cached(r, off); i++) r.reactor->RunOnce(false);
  return Cached(r, off);
}
}  // namespace

TEST_CASE("rule 9: a clean copy of backing data that a power cut loses does not outlive it") {
  const bool fill = GENERATE(false, true);
  INFO((fill ? "a fill of a write-around write" : "a write-through write's copy"));
  Rig r;
  QuietJournal(r, fill ? CacheMode::kWritearound : CacheMode::kWritethrough);
  r.Write(0, kBlock, 1);
  REQUIRE(SyncFlush(*r.dev).ok());  // X: on the backing media
  REQUIRE(r.set->Checkpoint().ok());
  r.Write(0, kBlock, 2);  // W: on the backing device, never flushed there
  if (fill) CHECK(r.Read(*r.dev, 0, kBlock) == Pattern(kBlock, 2));  // a miss: filled with W
  REQUIRE(FillLanded(r, 0));      // a clean copy of W either way
  REQUIRE(r.set->Commit().ok());  // journaled, hard
  r.CutNow();                     // the backing device loses W
  REQUIRE(r.Read(*r.backing, 0, kBlock) == Pattern(kBlock, 1));
  // W's copy recovered would read W now, and X once its bucket is
  // reclaimed: newer data served, then older (issue 30 item 5, H2).
  CHECK(!Cached(r, 0));
  CHECK(r.Read(*r.dev, 0, kBlock) == Pattern(kBlock, 1));
}

TEST_CASE("rule 9: a checkpoint makes the backing data of the clean copies it holds durable first") {
  Rig r;
  QuietJournal(r, CacheMode::kWritethrough);
  r.Write(0, kBlock, 1);
  REQUIRE(SyncFlush(*r.dev).ok());
  r.Write(0, kBlock, 2);              // W, cached clean, not flushed below
  REQUIRE(r.set->Checkpoint().ok());  // its copy is in the checkpoint's nodes
  r.CutNow();
  // The copy and the media agree: both W (the checkpoint flushed it).
  CHECK(r.Read(*r.backing, 0, kBlock) == Pattern(kBlock, 2));
  CHECK(r.Read(*r.dev, 0, kBlock) == Pattern(kBlock, 2));
}

TEST_CASE("rule 9: clean copies a backing flush covers, and fills of flushed data, survive a power cut") {
  Rig r;
  QuietJournal(r, CacheMode::kWritethrough);
  r.Write(0, kBlock, 1);
  r.Write(8 * kBlock, kBlock, 3, kIoFua);  // FUA: durable below at once, so its copy is too
  REQUIRE(r.set->Commit().ok());           // the copies' entry is written...
  REQUIRE(SyncFlush(*r.dev).ok());         // ...before this backing flush is issued
  // A fill now reads durable data: no write is waiting for a flush.
  r.set->knobs().cache_mode = CacheMode::kWritearound;
  r.Write(16 * kBlock, kBlock, 4);
  REQUIRE(SyncFlush(*r.dev).ok());
  CHECK(!Cached(r, 16 * kBlock));
  CHECK(r.Read(*r.dev, 16 * kBlock, kBlock) == Pattern(kBlock, 4));  // a miss, filled
  CHECK(FillLanded(r, 16 * kBlock));
  REQUIRE(r.set->Commit().ok());  // the fills and the flush's record
  r.CutNow();
  CHECK(Cached(r, 0));
  CHECK(Cached(r, 8 * kBlock));
  CHECK(Cached(r, 16 * kBlock));
  CHECK(r.Read(*r.dev, 0, kBlock) == Pattern(kBlock, 1));
  CHECK(r.Read(*r.dev, 8 * kBlock, kBlock) == Pattern(kBlock, 3));
  CHECK(r.Read(*r.dev, 16 * kBlock, kBlock) == Pattern(kBlock, 4));
}

// The router's two roads for a writeback write (CachedDevice::DoWrite):
// below the cutoffs it goes dirty into the cache without the dirty lookup
// (DirtyWriteEngine::TakesWithoutLookup); past cutoff_writeback the lookup
// decides — over dirty data it is still taken, over none it goes through.
// Fails if TakesWithoutLookup takes a write the cutoff turns away.
TEST_CASE("writeback: past cutoff_writeback a write over dirty data is taken, one over none goes through, a FUA one is taken") {
  Rig r;
  r.set->knobs().writeback_order = WritebackOrder::kLba;  // no ordered gate: the write goes through at once
  r.Write(0, 4 * kBlock, 1);  // below the cutoffs
  CHECK(r.dev->dirty_bytes() == 4 * kBlock);
  REQUIRE(r.set->in_use_percent() > 0);
  r.set->knobs().cutoff_writeback = 0;
  r.Write(kBlock, kBlock, 2);  // over dirty data
  CHECK(r.dev->cutoff_writethroughs() == 0);
  CHECK(r.dev->dirty_bytes() == 4 * kBlock);
  CHECK(r.Read(*r.backing, kBlock, kBlock) != Pattern(kBlock, 2));
  r.Write(64 * kBlock, kBlock, 3);  // over none
  CHECK(r.dev->cutoff_writethroughs() == 1);
  CHECK(r.Read(*r.backing, 64 * kBlock, kBlock) == Pattern(kBlock, 3));
  r.Write(128 * kBlock, kBlock, 4, kIoFua);  // sync: up to the sync cutoff
  CHECK(r.dev->cutoff_writethroughs() == 1);
  CHECK(r.dev->dirty_bytes() == 5 * kBlock);
  auto first = Pattern(4 * kBlock, 1);
  first.resize(kBlock);
  CHECK(r.Read(*r.dev, 0, kBlock) == first);
  CHECK(r.Read(*r.dev, kBlock, kBlock) == Pattern(kBlock, 2));
  CHECK(r.Read(*r.dev, 64 * kBlock, kBlock) == Pattern(kBlock, 3));
  CHECK(r.Read(*r.dev, 128 * kBlock, kBlock) == Pattern(kBlock, 4));
}

// Rule 5, over dirty data, the FUA (WriteThroughEngine::Write): fails with
// the backing write's kIoFua taken out — the commit drops the dirty copy,
// the cut drops the backing write: the range reads zeros.
TEST_CASE("writeback: a write over dirty data that goes through keeps the old copy until it lands") {
  Rig r;
  r.Write(0, 4 * kBlock, 1);
  REQUIRE(SyncFlush(*r.dev).ok());
  // The cache takes no more writeback: this one goes to the backing device.
  r.set->knobs().cutoff_writeback_sync = 1;
  r.set->knobs().cutoff_writeback = 1;
  r.Write(0, 4 * kBlock, 2);
  CHECK(r.Read(*r.dev, 0, 4 * kBlock) == Pattern(4 * kBlock, 2));
  r.PowerCut();
  // Not flushed: either copy may come back — never the backing device's zeros.
  auto got = r.Read(*r.dev, 0, 4 * kBlock);
  CHECK((got == Pattern(4 * kBlock, 1) || got == Pattern(4 * kBlock, 2)));
}

}  // namespace
}  // namespace ubcache

namespace ubcache {
namespace {

TEST_CASE("moving GC copies live data out of fragmented buckets, dirty data stays dirty, and survives a power cut") {
  Rig r(16 << 20, 64 << 20);
  const uint64_t kChunk = 64 << 10;
  // Buckets filled with dirty data, then three of every four 4 KiB blocks
  // rewritten elsewhere: each of those buckets is a quarter live.
  const uint64_t total = 4 << 20;  // a quarter of the cache: under cutoff_writeback
  for (uint64_t off = 0; off < total; off += kChunk) r.Write(off, kChunk, off);
  auto rewritten = [](uint64_t off) { return off / kBlock % 4 != 3; };
  for (uint64_t off = 0; off < total; off += kBlock)
    if (rewritten(off)) r.Write(off, kBlock, 1 << 20 | off);
  REQUIRE(SyncFlush(*r.dev).ok());
  uint64_t dirty = r.dev->dirty_bytes();
  CHECK(dirty == total);
  auto gc = r.set->RunGc(true);
  REQUIRE(gc.ok());
  CHECK(r.set->moving_gc_bytes() > 0);
  CHECK(r.dev->dirty_bytes() == dirty);  // moved, still dirty
  auto check = [&] {
    for (uint64_t off = 0; off < total; off += kBlock) {
      INFO("offset " << off);
      auto got = r.Read(*r.dev, off, kBlock);
      if (rewritten(off)) {
        REQUIRE(got == Pattern(kBlock, 1 << 20 | off));
      } else {
        auto first = Pattern(kChunk, off / kChunk * kChunk);
        REQUIRE(std::equal(got.begin(), got.end(), first.begin() + static_cast<long>(off % kChunk)));
      }
    }
  };
  check();
  // The moves were committed before the old buckets could be reused.
  for (int i = 0; i < 3; i++) r.set->buckets().Refill(ReplacementPolicy::kLru);
  r.PowerCut();
  CHECK(r.dev->dirty_bytes() == dirty);
  check();
}

TEST_CASE("writeback: a fenced device fails every request, writes nothing back, and its fence outlives a crash") {
  Rig r;
  r.Write(0, 64 << 10, 1);
  uint64_t dirty = r.set->index().DirtyBytes(r.dev->dev_index());
  REQUIRE(dirty == 64 << 10);
  Uuid uuid = ReadBackingSuperblock(*r.raw_backing).value().uuid;
  r.dev->Fence("the test took it over");
  CHECK(r.dev->fenced());
  CHECK(r.dev->fence_reason() == "the test took it over");
  AlignedBuffer b(4096);
  Status st = SyncWrite(*r.dev, 0, 4096, b.data());
  CHECK(st.code() == Status::Code::kIoError);
  CHECK_THAT(st.message(), Catch::Contains("fenced"));
  CHECK_FALSE(SyncRead(*r.dev, 0, 4096, b.data()).ok());
  CHECK_FALSE(SyncFlush(*r.dev).ok());
  CHECK_FALSE(r.dev->Detach().ok());
  // The writeback thread records the fence, and writes nothing back even
  // when asked to run and to drain.
  r.set->knobs().writeback_running = true;
  Status drained = r.dev->writeback()->Drain([](const std::string&) {});
  CHECK_THAT(drained.message(), Catch::Contains("is fenced"));
  for (int i = 0; i < 500 && !r.set->FencedSince(uuid); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(r.set->FencedSince(uuid));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(r.set->index().DirtyBytes(r.dev->dev_index()) == dirty);
  CHECK(r.Read(*r.backing, 0, 64 << 10) == std::vector<uint8_t>(64 << 10, 0));
  // On the cache device: a crash and a recovery find it, and the dirty data.
  r.Crash();
  REQUIRE(r.set->FencedSince(uuid));
  CHECK(r.set->index().DirtyBytes(r.dev->dev_index()) == dirty);
  CHECK(r.set->DropDevice(r.dev->dev_index(), r.dev->size()).ok());
  CHECK(r.set->Commit().ok());
  CHECK(r.set->ClearFence(uuid).ok());
  r.Crash();
  CHECK_FALSE(r.set->FencedSince(uuid));
  CHECK(r.set->index().DirtyBytes(r.dev->dev_index()) == 0);
}

// The ordering rules of doc/design.md, one test each that fails when the
// rule's step is taken out (issue 29). How each was broken to see it fail
// is written at the test; the breakage was never committed.

// Rule 2 (CacheSet::JournalLoop, ExtentIndex::Commit): a writeback write's
// soft entry is made durable by the next hard commit, within
// journal_delay_ms, even one with no ops of its own. Fails when broken
// either way: JournalLoop's `hard` forced false (every commit soft), or
// ExtentIndex::Commit returning before SyncJournal when it has no ops.
TEST_CASE("rule 2: an acknowledged writeback write is durable within journal_delay_ms, with no FLUSH") {
  Rig r;
  r.Write(64 * kBlock, kBlock, 9);  // the backing superblock is dirty from here on
  REQUIRE(SyncFlush(*r.dev).ok());
  r.set->knobs().journal_delay_ms = 20;
  r.Write(0, kBlock, 1);  // acknowledged after a soft commit
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  r.CutNow();
  CHECK(r.Read(*r.dev, 0, kBlock) == Pattern(kBlock, 1));
}

// Issue 29 item 3: a writeback write's soft commit is written on the
// reactor that serves the request (CacheSet::LeadSoftCommit) — no hop
// through ub-journal, none through the node store's I/O thread — and it
// still survives a crash of the daemon, and a power cut once flushed.
TEST_CASE("the writeback ack: its soft commit is written on the request's reactor, with no hop through the I/O thread") {
  Rig r(32 << 20, 64 << 20, /*journal_buckets=*/64);  // no checkpoint (nodes: I/O thread) in 100 records
  r.set->knobs().journal_delay_ms = 60000;  // no periodic hard commit in the way
  r.Write(512 * kBlock, kBlock, 7);         // the first dirty write: the backing superblock
  REQUIRE(SyncFlush(*r.dev).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const CacheSet::CommitStats before = r.set->commit_stats();
  constexpr uint64_t kWrites = 100;
  for (uint64_t i = 0; i < kWrites; i++) r.Write(i * 2 * kBlock, kBlock, 100 + i);
  const CacheSet::CommitStats after = r.set->commit_stats();
  INFO("reactor commits " << after.reactor_commits - before.reactor_commits << ", handed back "
                          << after.handed_back - before.handed_back << ", I/O thread calls "
                          << after.io_thread_calls - before.io_thread_calls);
  CHECK(after.reactor_commits - before.reactor_commits == kWrites);  // one each: a write at a time
  CHECK(after.handed_back == before.handed_back);
  CHECK(after.io_thread_calls == before.io_thread_calls);
  // kill -9: what was acknowledged is in the journal already.
  r.Crash();
  for (uint64_t i = 0; i < kWrites; i++) CHECK(r.Read(*r.dev, i * 2 * kBlock, kBlock) == Pattern(kBlock, 100 + i));
  // And a FLUSH (a hard commit, on the journal thread) makes them survive a
  // power cut: the hard record's PREFLUSH covers the soft ones before it.
  for (uint64_t i = 0; i < kWrites; i++) r.Write(i * 2 * kBlock + kBlock, kBlock, 300 + i);
  REQUIRE(SyncFlush(*r.dev).ok());
  r.CutNow();
  for (uint64_t i = 0; i < kWrites; i++) {
    CHECK(r.Read(*r.dev, i * 2 * kBlock, kBlock) == Pattern(kBlock, 100 + i));
    CHECK(r.Read(*r.dev, i * 2 * kBlock + kBlock, kBlock) == Pattern(kBlock, 300 + i));
  }
}

// Soft commits led by several threads' reactors at once, against hard
// commits (FLUSH), checkpoints and gens appends on other threads: every
// acknowledged write is found after a crash, and the journal's records keep
// their chain (a record written out of order would end the replay early).
TEST_CASE("the writeback ack: reactor-led soft commits from many threads keep the journal's order") {
  Rig r(64 << 20, 64 << 20);
  r.set->knobs().journal_delay_ms = 5;  // hard commits all the time, beside the soft ones
  r.Write(1020 * kBlock, kBlock, 7);
  REQUIRE(SyncFlush(*r.dev).ok());
  constexpr int kThreads = 3;
  constexpr uint64_t kPerThread = 300;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};  // Catch2's macros are for the test's own thread
  std::thread checkpoints([&] {
    while (!stop.load()) {
      if (!r.set->Checkpoint().ok()) failures++;
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  });
  std::vector<std::thread> writers;
  // Each writer's reactor outlives every writer: another thread's Post (an
  // answer, a lead) may still be returning when this one has its answer.
  std::vector<std::unique_ptr<Reactor>> reactors(kThreads);
  for (int t = 0; t < kThreads; t++) {
    writers.emplace_back([&, t] {
      reactors[t] = std::move(Reactor::Create().value());
      reactors[t]->Bind();
      for (uint64_t i = 0; i < kPerThread; i++) {
        uint64_t off = (t * kPerThread + i) * kBlock;
        auto p = Pattern(kBlock, 1000 * (t + 1) + i);
        AlignedBuffer b(kBlock);
        std::copy(p.begin(), p.end(), b.data());
        if (!SyncWrite(*r.dev, off, kBlock, b.data(), 0).ok()) failures++;
        if (i % 50 == 49 && t == 0 && !SyncFlush(*r.dev).ok()) failures++;
      }
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  checkpoints.join();
  CHECK(failures.load() == 0);
  const CacheSet::CommitStats c = r.set->commit_stats();
  INFO("reactor commits " << c.reactor_commits << ", handed back " << c.handed_back);
  CHECK(c.reactor_commits > 0);
  r.Crash();
  for (int t = 0; t < kThreads; t++)
    for (uint64_t i = 0; i < kPerThread; i++)
      CHECK(r.Read(*r.dev, (t * kPerThread + i) * kBlock, kBlock) == Pattern(kBlock, 1000 * (t + 1) + i));
}

// Rule 3, the commit (Writeback::CommitBeforeWriteback): fails with the
// pass's commit taken out (CommitBeforeWriteback returning true at once):
// the cut keeps the backing device's W and the old clean copy X.
TEST_CASE("rule 3: what writeback writes back is in the durable index before the backing device gets it") {
  Rig r;
  QuietJournal(r, CacheMode::kWritethrough);
  r.Write(0, kBlock, 1, kIoFua);    // X: cached clean, durable below
  REQUIRE(SyncFlush(*r.dev).ok());  // and its copy's entry
  r.set->knobs().cache_mode = CacheMode::kWriteback;
  r.Write(0, kBlock, 2);  // W: dirty, its entry written soft
  REQUIRE(r.dev->writeback()->Drain([](const std::string&) {}).ok());
  r.CutNow();
  REQUIRE(r.Read(*r.backing, 0, kBlock) == Pattern(kBlock, 2));
  // A recovered index without W would serve X's copy over the media's W.
  CHECK(r.Read(*r.dev, 0, kBlock) == Pattern(kBlock, 2));
}

// Rule 3, the flush (Writeback::FlushAndMarkClean): fails with the flush
// taken out (`fst` always OK): data marked clean, and committed, that the
// backing device then loses. Dirty data whose writeback fails keeps the
// backing superblock dirty, so no flush of the clean transition hides it.
TEST_CASE("rule 3: writeback marks data clean only once the backing device flushed it, while other data stays dirty") {
  Rig r;
  const uint64_t stuck = 1024 * kBlock;
  r.Write(0, 4 * kBlock, 1);
  r.Write(stuck, kBlock, 2);
  REQUIRE(SyncFlush(*r.dev).ok());
  FaultConfig bc = r.raw_backing->config();
  bc.eio_ranges = {{ReadBackingSuperblock(*r.raw_backing).value().data_offset_bytes() + stuck, kBlock}};
  bc.eio_reads = false;
  r.raw_backing->SetConfig(bc);
  r.set->knobs().writeback_running = true;
  for (int i = 0; i < 3000 && r.dev->dirty_bytes() > kBlock; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  r.set->knobs().writeback_running = false;
  REQUIRE(r.dev->dirty_bytes() == kBlock);
  REQUIRE(r.super->state() == BackingState::kDirty);
  REQUIRE(r.set->Commit().ok());  // the clean marks
  r.CutNow();
  CHECK(r.dev->dirty_bytes() == kBlock);
  CHECK(r.Read(*r.backing, 0, 4 * kBlock) == Pattern(4 * kBlock, 1));
  CHECK(r.Read(*r.dev, stuck, kBlock) == Pattern(kBlock, 2));
}

// Rule 5, over dirty data, the ack (WriteThroughEngine::Write's
// `op->commit`): fails with it forced false for a write over dirty data: a
// crash of the daemon alone replays the old dirty copy over the
// acknowledged write (and writeback would write it over the newer one).
// The FUA half is "writeback: a write over dirty data that goes through
// keeps the old copy until it lands" (fails without the kIoFua).
TEST_CASE("rule 5: a write that goes through over dirty data is acknowledged once the dirty copy's removal is durable") {
  Rig r;
  r.set->knobs().journal_delay_ms = 60000;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  r.Write(0, 4 * kBlock, 1);
  REQUIRE(SyncFlush(*r.dev).ok());
  r.set->knobs().cutoff_writeback_sync = 1;
  r.set->knobs().cutoff_writeback = 1;
  r.Write(0, 4 * kBlock, 2);  // through to the backing device, FUA
  r.Crash();
  CHECK(r.Read(*r.dev, 0, 4 * kBlock) == Pattern(4 * kBlock, 2));
}

// Rule 6 (CacheSet::WriteCheckpoint): the old journal half is untouched
// until the superblock names the new one. Fails when the checkpoint writes
// its table into the live half (`next = active_half_`): a cut before the
// superblock then finds the old root with a table that is not its own,
// starts cold and loses the dirty data.
TEST_CASE("rule 6: a checkpoint cut before its superblock lands recovers the one before, dirty data and all") {
  Rig r;
  for (uint64_t i = 0; i < 16; i++) r.Write(i * 2 * kBlock, kBlock, i);
  REQUIRE(SyncFlush(*r.dev).ok());
  FaultConfig live = r.cache->config();
  FaultConfig sb_fails = live;
  sb_fails.eio_ranges = {{kSuperblockOffset, kSuperblockSize}};
  sb_fails.eio_reads = false;
  r.cache->SetConfig(sb_fails);
  CHECK_FALSE(r.set->Checkpoint().ok());  // nodes and the new half written, no superblock
  r.cache->SetConfig(live);
  r.CutNow();
  CHECK(r.set->warm());
  CHECK(r.dev->dirty_bytes() == 16 * kBlock);
  for (uint64_t i = 0; i < 16; i++) {
    INFO("block " << i);
    CHECK(r.Read(*r.dev, i * 2 * kBlock, kBlock) == Pattern(kBlock, i));
  }
}

}  // namespace
}  // namespace ubcache
