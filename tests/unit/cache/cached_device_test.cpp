// SPDX-License-Identifier: Apache-2.0
// CachedDevice over RAM devices: the read and write paths, per mode, and GC.
#include "cache/cached_device.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "backend/mem_device.h"
#include "backend/sync_io.h"
#include "timing.h"
#include "util/aligned_buffer.h"
#include "util/clock.h"
#include "util/thread.h"

using namespace ubcache;

namespace {

constexpr uint64_t kBucket = 64 << 10;

uint8_t PatternByte(uint64_t offset, uint8_t seed) {
  return static_cast<uint8_t>((offset / 4096) * 31 + seed);
}

// The cache device as the set sees it: counts its reads, and fails them
// on demand.
class CountingDevice final : public BlockDevice {
 public:
  explicit CountingDevice(BlockDevice* lower)
      : BlockDevice("counting", lower->size(), lower->logical_block_size(), false), lower_(lower) {}
  uint64_t reads = 0;
  bool fail_reads = false;

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override {
    if (req.op == IoOp::kRead) {
      reads++;
      if (fail_reads) {
        done(Status::IoError("counting: injected read error"));
        return;
      }
    }
    lower_->Submit(req, std::move(done));
  }

 private:
  BlockDevice* lower_;
};

struct Rig {
  std::unique_ptr<Reactor> reactor;
  std::unique_ptr<BlockDevice> cache, backing;
  std::unique_ptr<CountingDevice> cache_view;  // the set's cache device
  std::unique_ptr<CacheSet> set;
  std::unique_ptr<CachedDevice> dev;

  explicit Rig(uint64_t cache_size = 8 << 20, uint64_t backing_size = 64 << 20) {
    reactor = std::move(Reactor::Create().value());
    reactor->Bind();
    cache = std::move(MemDevice::Create("mem:cache", cache_size).value());
    backing = std::move(MemDevice::Create("mem:backing", backing_size).value());
    Fill(0, backing_size, 1);
    CacheSet::Options o;
    o.bucket_size = kBucket;
    o.reserved_bytes = 1 << 20;
    cache_view = std::make_unique<CountingDevice>(cache.get());
    set = std::move(CacheSet::Create(cache_view.get(), o).value());
    set->knobs().sequential_cutoff = 0;  // every read may be cached
    // Data paths, not congestion: no read or write bypasses for it (the
    // auto rule is tested below and in admission_test).
    set->knobs().congested_read_threshold_us = 0;
    set->knobs().congested_write_threshold_us = 0;
    dev = std::make_unique<CachedDevice>("mem:backing", set.get(), 0, backing.get());
  }
  void Fill(uint64_t off, uint64_t len, uint8_t seed) {
    AlignedBuffer b(1 << 20);
    for (uint64_t done = 0; done < len; done += b.size()) {
      for (uint64_t i = 0; i < b.size(); i++) b.data()[i] = PatternByte(off + done + i, seed);
      REQUIRE(SyncWrite(*backing, off + done, b.size(), b.data()).ok());
    }
  }
  // Lets fills (which finish after the read is answered) land.
  void Settle() {
    for (int i = 0; i < 20; i++) reactor->RunOnce(false);
  }
  bool ReadMatches(uint64_t off, uint64_t len, uint8_t seed) {
    AlignedBuffer b(len);
    if (!SyncRead(*dev, off, len, b.data()).ok()) return false;
    Settle();
    for (uint64_t i = 0; i < len; i++)
      if (b.data()[i] != PatternByte(off + i, seed)) return false;
    return true;
  }
  StatsGroup Stats() { return dev->stats().Snapshot(StatsWindow::kTotal, NowNanos()); }
};

}  // namespace

TEST_CASE("a second read of a range is a hit and returns the backing data") {
  Rig rig;
  CHECK(rig.ReadMatches(4 << 20, 64 << 10, 1));
  CHECK(rig.ReadMatches(4 << 20, 64 << 10, 1));
  auto s = rig.Stats();
  CHECK(s.cache_misses == 1);
  CHECK(s.cache_hits == 1);
}

TEST_CASE("a partial hit reads the cached part from the cache and the rest from backing") {
  Rig rig;
  CHECK(rig.ReadMatches(1 << 20, 8 << 10, 1));
  CHECK(rig.ReadMatches((1 << 20) - (8 << 10), 32 << 10, 1));
  CHECK(rig.Stats().cache_misses == 2);
  CHECK(rig.ReadMatches((1 << 20) - (8 << 10), 32 << 10, 1));
  CHECK(rig.Stats().cache_hits == 1);
}

TEST_CASE("a hit filled in several pieces that lie together on the cache device is one cache read") {
  Rig rig;
  CHECK(rig.ReadMatches(1 << 20, 256 << 10, 1));  // a miss, filled in four 64 KiB pieces
  uint64_t before = rig.cache_view->reads;
  CHECK(rig.ReadMatches(1 << 20, 256 << 10, 1));
  CHECK(rig.Stats().cache_hits == 1);
  CHECK(rig.cache_view->reads == before + 1);
  // A read that starts and ends inside the pieces is one read too.
  before = rig.cache_view->reads;
  CHECK(rig.ReadMatches((1 << 20) + (16 << 10), 200 << 10, 1));
  CHECK(rig.cache_view->reads == before + 1);
}

TEST_CASE("a failed cache read of several clean pieces reads them all from the backing device") {
  Rig rig;
  CHECK(rig.ReadMatches(1 << 20, 256 << 10, 1));
  rig.cache_view->fail_reads = true;
  CHECK(rig.ReadMatches(1 << 20, 256 << 10, 1));
  CHECK(rig.set->io_errors() >= 1);
}

TEST_CASE("writethrough: a write reaches backing and cache, and reads see it") {
  Rig rig;
  CHECK(rig.ReadMatches(0, 64 << 10, 1));  // cached copy of the old data
  AlignedBuffer b(16 << 10);
  for (uint64_t i = 0; i < b.size(); i++) b.data()[i] = PatternByte(8192 + i, 9);
  REQUIRE(SyncWrite(*rig.dev, 8192, b.size(), b.data()).ok());
  rig.Settle();
  AlignedBuffer back(16 << 10);
  REQUIRE(SyncRead(*rig.backing, 8192, back.size(), back.data()).ok());
  CHECK(std::memcmp(back.data(), b.data(), b.size()) == 0);
  CHECK(rig.ReadMatches(8192, 16 << 10, 9));
  CHECK(rig.Stats().cache_hits == 1);  // the written range was inserted
  CHECK(rig.ReadMatches(0, 8192, 1));  // the untouched head is still the old data
}

TEST_CASE("writearound: a write invalidates the cached copy and is not cached") {
  Rig rig;
  rig.set->knobs().cache_mode = CacheMode::kWritearound;
  CHECK(rig.ReadMatches(0, 64 << 10, 1));
  AlignedBuffer b(64 << 10);
  for (uint64_t i = 0; i < b.size(); i++) b.data()[i] = PatternByte(i, 5);
  REQUIRE(SyncWrite(*rig.dev, 0, b.size(), b.data()).ok());
  rig.Settle();
  CHECK(rig.ReadMatches(0, 64 << 10, 5));
  auto s = rig.Stats();
  CHECK(s.cache_hits == 0);  // never a stale hit on the old copy
  CHECK(s.bypassed == 64 << 10);
}

TEST_CASE("cache mode none caches nothing") {
  Rig rig;
  rig.set->knobs().cache_mode = CacheMode::kNone;
  CHECK(rig.ReadMatches(0, 64 << 10, 1));
  CHECK(rig.ReadMatches(0, 64 << 10, 1));
  auto s = rig.Stats();
  CHECK(s.cache_hits + s.cache_bypass_hits == 0);
  CHECK(s.cache_bypass_misses == 2);
}

TEST_CASE("a sequential stream past the cutoff bypasses the cache") {
  Rig rig;
  rig.set->knobs().sequential_cutoff = 1 << 20;
  for (uint64_t off = 0; off < (4 << 20); off += 128 << 10) CHECK(rig.ReadMatches(off, 128 << 10, 1));
  auto s = rig.Stats();
  CHECK(s.bypassed >= 3 << 20);
  CHECK(rig.dev->sequential_bypasses() >= 24);  // the requests past the first 1 MiB
  CHECK(rig.dev->congested_bypasses() == 0);
}

TEST_CASE("sequential_cutoff auto: a stream is cached while there is space to spare, then bypasses, "
          "and is admitted when read again") {
  Rig rig;  // 8 MiB of cache in 64 KiB buckets, 64 MiB of backing
  rig.set->knobs().sequential_cutoff = kAutoCutoff;
  const uint64_t mib = 1 << 20;
  auto stream = [&](uint64_t from, uint64_t len) {
    for (uint64_t off = from; off < from + len; off += mib) REQUIRE(rig.ReadMatches(off, mib, 1));
  };
  stream(16 * mib, 32 * mib);  // four times the cache
  CHECK(rig.dev->spare_admissions() > 0);    // the first megabytes past 4 MiB: free space
  CHECK(rig.dev->sequential_bypasses() > 0);  // then no more to spare
  CHECK(rig.dev->ghost_admissions() == 0);
  uint64_t bypassed = rig.dev->sequential_bypasses();
  // The same stream again: what bypassed is on the ghost list, so it is cached now.
  stream(16 * mib, 32 * mib);
  CHECK(rig.dev->ghost_admissions() > 0);
  // Only what the first pass cached into the spare space, and lost since
  // to the second pass's own fills, bypasses now.
  CHECK(rig.dev->sequential_bypasses() - bypassed < bypassed / 4);
  // A stream the cache has never seen, with no space to spare: bypasses.
  stream(0, 8 * mib);
  CHECK(rig.dev->sequential_bypasses() > bypassed);
}

TEST_CASE("sequential_cutoff auto: buckets GC found dead count as space to spare for a stream") {
  Rig rig(16 << 20);  // 16 MiB of cache in 64 KiB buckets
  const uint64_t mib = 1 << 20;
  // Fill the cache (cutoff 0: everything is admitted), past its size.
  for (uint64_t off = 0; off < 24 * mib; off += mib) REQUIRE(rig.ReadMatches(off, mib, 1));
  rig.set->knobs().sequential_cutoff = kAutoCutoff;
  // A new stream: no space to spare, so past 4 MiB it bypasses.
  for (uint64_t off = 32 * mib; off < 40 * mib; off += mib) REQUIRE(rig.ReadMatches(off, mib, 1));
  CHECK(rig.dev->spare_admissions() == 0);
  uint64_t bypassed = rig.dev->sequential_bypasses();
  CHECK(bypassed > 0);
  // The cached data is overwritten in writearound: every cached copy of it
  // is invalidated, and the next GC pass finds its buckets dead.
  rig.set->knobs().cache_mode = CacheMode::kWritearound;
  AlignedBuffer b(mib);
  for (uint64_t off = 0; off < 24 * mib; off += mib) {
    for (uint64_t i = 0; i < b.size(); i++) b.data()[i] = PatternByte(off + i, 7);
    REQUIRE(SyncWrite(*rig.dev, off, b.size(), b.data()).ok());
  }
  rig.set->knobs().cache_mode = CacheMode::kWritethrough;
  REQUIRE(rig.set->RunGc().ok());
  CHECK(rig.set->buckets().usage().dead > rig.set->buckets().usage().buckets / 4);
  // Another new stream: its first 4 MiB (not a stream yet) take dead
  // buckets, then the rest is admitted into the dead space left.
  for (uint64_t off = 48 * mib; off < 56 * mib; off += mib) REQUIRE(rig.ReadMatches(off, mib, 1));
  CHECK(rig.dev->spare_admissions() > 0);
  CHECK(rig.dev->sequential_bypasses() == bypassed);
  double hits = rig.Stats().cache_hits;
  for (uint64_t off = 48 * mib; off < 52 * mib; off += mib) REQUIRE(rig.ReadMatches(off, mib, 1));
  CHECK(rig.Stats().cache_hits > hits);
}

TEST_CASE("auto congestion: both devices measured, a cache as fast as the backing device never bypasses") {
  Rig rig;
  rig.set->knobs().congested_read_threshold_us = kAutoThresholdUs;
  rig.set->knobs().congested_write_threshold_us = kAutoThresholdUs;
  for (int pass = 0; pass < 3; pass++)
    for (uint64_t off = 0; off < (4 << 20); off += 64 << 10) REQUIRE(rig.ReadMatches(off, 64 << 10, 1));
  CHECK(rig.set->cache_time().Samples(ServiceTime::Op::kRead, 1) > 0);
  CHECK(rig.dev->backing_time().Samples(ServiceTime::Op::kRead, 1) > 0);
  // Two RAM devices: never clearly slower but for a scheduling hiccup,
  // whose sample the next dozen fast ones wash out.
  // A loaded machine has more hiccups: a bound, not 0. Sanitizer builds,
  // two tests to two cores, saw 33-78 of the 192 reads bypass (ASan, a
  // CPU hog beside it: 4 runs of 10; 0 of 10 in the release build): there
  // the bound is half the reads — a cache taken for slower all the time
  // would bypass nearly all of them.
#ifdef UBCACHE_TEST_SANITIZED
  constexpr uint64_t kHiccups = 96;
#else
  constexpr uint64_t kHiccups = 32;
#endif
  CHECK(rig.dev->auto_congested_bypasses() < kHiccups);
  StatsGroup g = rig.dev->stats().Snapshot(StatsWindow::kTotal, NowNanos());
  CHECK(g.cache_hits + g.cache_bypass_hits >= 2 * 64 - 32);
}

TEST_CASE("auto congestion: with the cache slower than the backing device, clean hits are read from the backing "
          "device, counted as bypass hits") {
  Rig rig;
  rig.set->knobs().congested_read_threshold_us = kAutoThresholdUs;
  const uint64_t kLen = 64 << 10;
  // Cached, and the backing device measured by the misses that filled it.
  for (uint64_t off = 0; off < (1 << 20); off += kLen) REQUIRE(rig.ReadMatches(off, kLen, 1));
  REQUIRE(rig.dev->backing_time().Samples(ServiceTime::Op::kRead, 1) >= kMinSamples);
  // The backing device's data changes under the cache (seed 2): a read
  // served by the cache returns seed 1, one read around it seed 2.
  rig.Fill(0, 1 << 20, 2);
  CHECK(rig.ReadMatches(0, kLen, 1));  // the cache is as fast: a hit from the cache
  // The cache device now answers 4 KiB-64 KiB reads in 20 ms.
  for (int i = 0; i < 16; i++)
    rig.set->cache_time().Observe(ServiceTime::Op::kRead, kLen, 20'000'000, NowNanos());
  StatsGroup before = rig.Stats();
  CHECK(rig.ReadMatches(kLen, kLen, 2));  // read around the cache
  StatsGroup after = rig.Stats();
  CHECK(after.cache_bypass_hits == before.cache_bypass_hits + 1);
  CHECK(after.cache_misses == before.cache_misses);
  CHECK(rig.dev->auto_congested_bypasses() > 0);
}

TEST_CASE("stale pointer falls back to the backing device") {
  Rig rig(2 << 20);  // 16 data buckets of 64 KiB: easy to churn
  CHECK(rig.ReadMatches(0, 64 << 10, 1));
  // Fill the cache many times over so bucket 0's data is reclaimed.
  for (uint64_t off = 8 << 20; off < (16 << 20); off += 64 << 10) CHECK(rig.ReadMatches(off, 64 << 10, 1));
  CHECK(rig.ReadMatches(0, 64 << 10, 1));
}

TEST_CASE("GC lets buckets be reused past the generation lead and caching carries on") {
  Rig rig(2 << 20);
  // 16 data buckets; each churn over 2 MiB reuses every bucket about twice.
  for (int churn = 0; churn < 80; churn++) {
    for (uint64_t off = 0; off < (2 << 20); off += 64 << 10)
      REQUIRE(rig.ReadMatches((churn % 4) * (4 << 20) + off, 64 << 10, 1));
    if (rig.set->buckets().MaxGenLead() >= BucketAllocator::kMaxGenLead / 2) {
      auto dropped = rig.set->RunGc();
      REQUIRE(dropped.ok());
    }
  }
  CHECK(rig.set->gc_runs() > 0);
  // Still caching: a re-read of a fresh range hits.
  CHECK(rig.ReadMatches(40 << 20, 64 << 10, 1));
  double hits_before = rig.Stats().cache_hits;
  CHECK(rig.ReadMatches(40 << 20, 64 << 10, 1));
  CHECK(rig.Stats().cache_hits == hits_before + 1);
}

TEST_CASE("a prefetch (NBD CACHE) reads the range in, so the next read is a hit") {
  Rig rig;
  std::optional<Status> st;
  rig.dev->Prefetch(2 << 20, 3 << 20, [&](Status s) { st = std::move(s); });
  rig.reactor->RunUntil([&] { return st.has_value(); });
  REQUIRE(st->ok());
  rig.Settle();
  auto s = rig.Stats();
  CHECK(s.cache_readaheads == 3);  // three 1 MiB steps
  CHECK(s.cache_misses == 0);
  CHECK(rig.ReadMatches(2 << 20, 3 << 20, 1));
  CHECK(rig.Stats().cache_hits == 1);
}

TEST_CASE("a prefetch outside the device is refused") {
  Rig rig;
  std::optional<Status> st;
  rig.dev->Prefetch(rig.dev->size(), 4096, [&](Status s) { st = std::move(s); });
  rig.reactor->RunUntil([&] { return st.has_value(); });
  CHECK(st->IsNoSpace());
}

TEST_CASE("every client request is counted by operation when answered, failures as errors") {
  Rig rig;
  AlignedBuffer b(64 << 10);
  REQUIRE(SyncRead(*rig.dev, 0, 64 << 10, b.data()).ok());  // a miss
  rig.Settle();
  REQUIRE(SyncRead(*rig.dev, 0, 4096, b.data()).ok());  // a hit
  REQUIRE(SyncWrite(*rig.dev, 1 << 20, 8192, b.data()).ok());
  REQUIRE(SyncFlush(*rig.dev).ok());
  REQUIRE(SyncIo(*rig.dev, {IoOp::kDiscard, 0, 2 << 20, 4096, nullptr}).ok());
  REQUIRE(SyncIo(*rig.dev, {IoOp::kWriteZeroes, 0, 3 << 20, 8192, nullptr}).ok());
  std::optional<Status> st;
  rig.dev->Prefetch(4 << 20, 2 << 20, [&](Status s) { st = std::move(s); });
  rig.reactor->RunUntil([&] { return st.has_value(); });
  REQUIRE(st->ok());
  // Refused by BlockDevice's validation before it reaches the cache: not counted.
  CHECK(SyncRead(*rig.dev, rig.dev->size(), 4096, b.data()).IsNoSpace());
  rig.dev->Fence("the test took it over");
  CHECK_FALSE(SyncRead(*rig.dev, 0, 4096, b.data()).ok());
  CHECK_FALSE(SyncWrite(*rig.dev, 0, 4096, b.data()).ok());

  const RequestStats::Totals t = rig.dev->requests().Read();
  using RS = RequestStats;
  struct Want {
    RS::Op op;
    uint64_t requests, errors, bytes;
  };
  // The failed read and write carried no data; one prefetch however many steps.
  for (const Want& w : {Want{RS::kRead, 3, 1, (64 << 10) + 4096}, Want{RS::kWrite, 2, 1, 8192},
                        Want{RS::kFlush, 1, 0, 0}, Want{RS::kDiscard, 1, 0, 0}, Want{RS::kWriteZeroes, 1, 0, 0},
                        Want{RS::kCache, 1, 0, 0}}) {
    const RS::OpTotals& o = t[w.op];
    INFO(RS::OpName(w.op));
    CHECK(o.requests == w.requests);
    CHECK(o.errors == w.errors);
    CHECK(o.bytes == w.bytes);
    uint64_t in_buckets = 0;
    for (uint64_t n : o.buckets) in_buckets += n;
    CHECK(in_buckets == o.requests);
    CHECK(o.sum_ns > 0);
  }
}

TEST_CASE("a request's latency runs from its entry to its answer, the backing device's time included") {
  Rig rig;
  // A backing device that takes 3 ms a request, behind the same cache set.
  auto slow = OpenDevice("fault,latency_us=3000:mem:16M");
  REQUIRE(slow.ok());
  CachedDevice dev("slow", rig.set.get(), 1, slow->get());
  AlignedBuffer b(4096);
  REQUIRE(SyncRead(dev, 0, 4096, b.data()).ok());  // a miss: the backing device answers
  RequestStats::OpTotals r = dev.requests().Read()[RequestStats::kRead];
  REQUIRE(r.requests == 1);
  CHECK(r.sum_ns >= 3'000'000);
  // Nothing at or below 2.5 ms, the bound under 3 ms.
  for (int b = 0; b <= RequestStats::BucketOf(2'500'000); b++) CHECK(r.buckets[b] == 0);
  rig.Settle();  // its fill lands before the device goes
}

namespace {

// A backing device whose storage can grow under it: a view of the first
// `storage` bytes of a larger RAM device, as a file that was extended.
class GrowableDevice final : public BlockDevice {
 public:
  GrowableDevice(BlockDevice* lower, uint64_t size)
      : BlockDevice("growable", size, lower->logical_block_size(), false), lower_(lower), storage_(size) {}
  void set_storage(uint64_t bytes) { storage_ = bytes; }
  Result<uint64_t> Grow() override {
    UB_RETURN_IF_ERROR(SetGrownSize(storage_));
    return size();
  }

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override { lower_->Submit(req, std::move(done)); }

 private:
  BlockDevice* lower_;
  uint64_t storage_;
};

}  // namespace

TEST_CASE("a grown backing device grows the cached device, and the new range is read and cached") {
  Rig rig;
  GrowableDevice backing(rig.backing.get(), 32 << 20);
  CachedDevice dev("growable", rig.set.get(), 1, &backing);
  REQUIRE(dev.size() == 32 << 20);
  AlignedBuffer b(64 << 10);
  CHECK(SyncRead(dev, 40 << 20, b.size(), b.data()).IsNoSpace());
  backing.set_storage(64 << 20);
  auto r = dev.Grow();
  REQUIRE(r.ok());
  CHECK(*r == 64 << 20);
  CHECK(dev.size() == 64 << 20);
  for (int pass = 0; pass < 2; pass++) {
    REQUIRE(SyncRead(dev, 40 << 20, b.size(), b.data()).ok());
    rig.Settle();
    for (uint64_t i = 0; i < b.size(); i++) REQUIRE(b.data()[i] == PatternByte((40 << 20) + i, 1));
  }
  StatsGroup s = dev.stats().Snapshot(StatsWindow::kTotal, NowNanos());
  CHECK(s.cache_misses == 1);
  CHECK(s.cache_hits == 1);
  // Unchanged storage: the size stays, and it says so.
  auto again = dev.Grow();
  REQUIRE(again.ok());
  CHECK(*again == 64 << 20);
}

TEST_CASE("growing drops clean copies the index still holds past the old end") {
  // A clean copy of [40 MiB, +64 KiB) from a time the device was 64 MiB;
  // then the device is 32 MiB (as after an offline shrink), and the
  // storage is extended again with other data there.
  Rig rig;
  REQUIRE(rig.ReadMatches(40 << 20, 64 << 10, 1));
  REQUIRE(rig.ReadMatches(40 << 20, 64 << 10, 1));
  REQUIRE(rig.Stats().cache_hits == 1);
  rig.dev.reset();
  GrowableDevice backing(rig.backing.get(), 32 << 20);
  CachedDevice dev("growable", rig.set.get(), 0, &backing);  // the same device number
  rig.Fill(40 << 20, 1 << 20, 2);
  backing.set_storage(64 << 20);
  REQUIRE(dev.Grow().ok());
  AlignedBuffer b(64 << 10);
  REQUIRE(SyncRead(dev, 40 << 20, b.size(), b.data()).ok());
  for (uint64_t i = 0; i < b.size(); i++) REQUIRE(b.data()[i] == PatternByte((40 << 20) + i, 2));
}

TEST_CASE("a shrunk backing device is refused and the cached device keeps its size") {
  Rig rig;
  GrowableDevice backing(rig.backing.get(), 32 << 20);
  CachedDevice dev("growable", rig.set.get(), 1, &backing);
  backing.set_storage(16 << 20);
  auto r = dev.Grow();
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Status::Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("shrinking is not supported"));
  CHECK(dev.size() == 32 << 20);
  CHECK(backing.size() == 32 << 20);
}

TEST_CASE("on a serving reactor with index nodes evicted under it, every request parks and completes right") {
  Rig rig;
  // Another device's extents make every shard's tree two levels deep, so
  // a lookup of this device's range goes through nodes that can be evicted.
  for (uint64_t i = 0; i < 80000; i++)
    REQUIRE(rig.set->index().Insert(Extent{9, i * 8192, 4096, 0, 0, false}).ok());
  rig.set->index().SetCacheBytes(0);  // every node leaves memory as soon as it can
  constexpr uint64_t kSpan = 16 << 20, kBlock = 4096;
  std::vector<uint8_t> seed_of(kSpan / kBlock, 1);  // what each block holds: Fill's seed 1
  std::mt19937_64 rng(29);
  AlignedBuffer buf(64 << 10);
  uint64_t mismatches = 0;
  for (int n = 0; n < 600; n++) {
    {
      // Off the serving thread: write the dirty nodes the serving calls left
      // over budget, as housekeeping does, so the next calls miss nodes.
      ServingThreadScope not_serving(false);
      REQUIRE(rig.set->index().WriteOverBudget().ok());
    }
    ServingThreadScope serving;
    uint64_t blocks = 1 + rng() % 16;
    uint64_t off = (rng() % (kSpan / kBlock - blocks)) * kBlock;
    uint64_t len = blocks * kBlock;
    bool write = rng() % 2;
    uint8_t seed = static_cast<uint8_t>(2 + n % 200);
    if (write)
      for (uint64_t i = 0; i < len; i++) buf.data()[i] = PatternByte(off + i, seed);
    std::optional<Status> result;
    IoRequest req{write ? IoOp::kWrite : IoOp::kRead, 0, off, len, buf.data()};
    rig.dev->Submit(req, [&](Status st) { result = std::move(st); });
    rig.reactor->RunUntil([&] { return result.has_value(); });
    REQUIRE(result->ok());
    for (int i = 0; i < 20; i++) rig.reactor->RunOnce(false);  // fills land
    for (uint64_t b = 0; b < blocks; b++) {
      if (write) {
        seed_of[off / kBlock + b] = seed;
        continue;
      }
      for (uint64_t i = 0; i < kBlock; i++)
        if (buf.data()[b * kBlock + i] != PatternByte(off + b * kBlock + i, seed_of[off / kBlock + b]))
          mismatches++;
    }
  }
  CHECK(mismatches == 0);
  CHECK(rig.set->index().stats().node_parks > 0);  // they did park
  CHECK(rig.Stats().cache_hits > 0);
}
