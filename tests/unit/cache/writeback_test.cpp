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

  explicit Rig(uint64_t cache_size = 32 << 20, uint64_t backing_size = 64 << 20) {
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

TEST_CASE("writeback: a FUA write survives a power cut with no FLUSH") {
  Rig r;
  r.Write(8 * kBlock, 2 * kBlock, 7, kIoFua);
  r.PowerCut();
  CHECK(r.Read(*r.dev, 8 * kBlock, 2 * kBlock) == Pattern(2 * kBlock, 7));
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

TEST_CASE("writeback: a FLUSH flushes the backing device only when a client write reached it since its last flush") {
  Rig r;
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

TEST_CASE("writeback: a reclaimed bucket's generation is durable before the bucket is reused") {
  Rig r(16 << 20, 128 << 20);
  r.set->knobs().cache_mode = CacheMode::kWritethrough;
  // Range A cached (and journaled), then range B, four times the cache,
  // which reclaims and reuses every bucket A's extents point into.
  const uint64_t kChunk = 64 << 10, a_len = 8 << 20, b_off = 32 << 20, b_len = 64 << 20;
  for (uint64_t off = 0; off < a_len; off += kChunk) r.Write(off, kChunk, off);
  REQUIRE(SyncFlush(*r.dev).ok());
  for (uint64_t off = 0; off < b_len; off += kChunk) r.Write(b_off + off, kChunk, 1 << 30 | off);
  REQUIRE(SyncFlush(*r.dev).ok());
  CHECK(r.set->buckets().usage().reclaimed_background + r.set->buckets().usage().reclaimed_foreground > 0);
  r.PowerCut();
  // A replayed pointer into a reused bucket must be stale: A reads A.
  for (uint64_t off = 0; off < a_len; off += kChunk) {
    INFO("offset " << off);
    REQUIRE(r.Read(*r.dev, off, kChunk) == Pattern(kChunk, off));
  }
}

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

}  // namespace
}  // namespace ubcache
