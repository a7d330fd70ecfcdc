// SPDX-License-Identifier: Apache-2.0
// BucketAllocator: bcache's buckets (alloc.c). Allocations are contiguous
// runs in an open bucket tagged with its generation; reclaiming bumps the
// generation so old pointers go stale; lru/fifo/random choose the victim;
// open buckets, the metadata reserve and buckets waiting for GC are never
// taken; counts and the priority histogram stay consistent.
#include "cache/bucket_allocator.h"

#include "backend/reactor.h"
#include "util/thread.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "timing.h"

using namespace ubcache;

namespace {

constexpr uint64_t kBucket = 64 << 10;
using Space = BucketAllocator::Space;
constexpr auto kLru = ReplacementPolicy::kLru;
constexpr auto kFifo = ReplacementPolicy::kFifo;
constexpr auto kRandom = ReplacementPolicy::kRandom;

BucketAllocator::Options Opts(uint32_t nbuckets, uint32_t reserve = 0, unsigned writers = 1,
                              uint32_t first_bucket = 0) {
  BucketAllocator::Options o;
  o.bucket_size = kBucket;
  o.nbuckets = nbuckets;
  o.metadata_reserve = reserve;
  o.writers = writers;
  o.first_bucket = first_bucket;
  return o;
}

// An allocation whose write has completed at once (WriteDone), so the
// bucket is reclaimable as soon as its writer moves on.
Result<Space> Done(BucketAllocator& a, Result<Space> r) {
  if (r.ok()) a.WriteDone(r->bucket);
  return r;
}

// A whole bucket of data for writer `w`: always opens a new bucket.
Space Fill(BucketAllocator& a, ReplacementPolicy p = kLru, unsigned w = 0) {
  auto r = Done(a, a.Allocate(w, kBucket, p));
  REQUIRE(r.ok());
  return *r;
}

Space Ok(Result<Space> r) {
  REQUIRE(r.ok());
  return std::move(r).value();
}

uint64_t HistogramSum(const BucketAllocator& a) {
  std::vector<uint64_t> h = a.prio_histogram();
  return std::accumulate(h.begin(), h.end(), uint64_t{0});
}

void RequireConsistent(const BucketAllocator& a) {
  BucketAllocator::Usage u = a.usage();
  REQUIRE(u.free + u.data + u.metadata + u.reserved == u.buckets);
  REQUIRE(HistogramSum(a) == u.data);
}

}  // namespace

TEST_CASE("allocations within a bucket are contiguous and tagged with its generation") {
  BucketAllocator a(Opts(8, 0, 1, 2));
  uint64_t expect = 2 * kBucket;  // buckets below first_bucket hold superblock/journal
  for (int i = 0; i < 16; i++) {
    auto r = Done(a, a.Allocate(0, 4096, kLru));
    REQUIRE(r.ok());
    REQUIRE(r->cache_offset == expect);
    REQUIRE(r->bucket == 2);
    REQUIRE(a.BucketOf(r->cache_offset) == 2);
    REQUIRE(r->gen == 0);
    REQUIRE(a.Valid(r->cache_offset, r->gen));
    expect += 4096;
  }
  // The bucket is full: the next allocation starts a new one at its start.
  auto next = Done(a, a.Allocate(0, 4096, kLru));
  REQUIRE(next.ok());
  REQUIRE(next->bucket == 3);
  REQUIRE(next->cache_offset == 3 * kBucket);
}

TEST_CASE("an allocation that does not fit the open bucket's remainder starts a new bucket") {
  BucketAllocator a(Opts(4));
  REQUIRE(Done(a, a.Allocate(0, kBucket - 4096, kLru))->cache_offset == 0);
  auto r = Done(a, a.Allocate(0, 8192, kLru));
  REQUIRE(r.ok());
  REQUIRE(r->cache_offset == kBucket);  // never straddles buckets
  REQUIRE(Done(a, a.Allocate(0, kBucket - 8192, kLru))->cache_offset == kBucket + 8192);
}

TEST_CASE("allocation sizes of 0 or more than a bucket are rejected") {
  BucketAllocator a(Opts(4));
  REQUIRE(Done(a, a.Allocate(0, 0, kLru)).status().IsInvalidArgument());
  REQUIRE(Done(a, a.Allocate(0, kBucket + 1, kLru)).status().IsInvalidArgument());
  REQUIRE(Done(a, a.Allocate(0, kBucket, kLru)).ok());
}

TEST_CASE("each writer fills its own open bucket") {
  BucketAllocator a(Opts(8, 0, 2));
  Space w0 = Ok(Done(a, a.Allocate(0, 4096, kLru)));
  Space w1 = Ok(Done(a, a.Allocate(1, 4096, kLru)));
  REQUIRE(w0.bucket != w1.bucket);
  REQUIRE(Done(a, a.Allocate(0, 4096, kLru))->cache_offset == w0.cache_offset + 4096);
  REQUIRE(Done(a, a.Allocate(1, 4096, kLru))->cache_offset == w1.cache_offset + 4096);
}

TEST_CASE("buckets below first_bucket are reserved and never handed out") {
  BucketAllocator a(Opts(6, 0, 1, 3));
  BucketAllocator::Usage u = a.usage();
  REQUIRE(u.buckets == 6);
  REQUIRE(u.reserved == 3);
  REQUIRE(u.free == 3);
  for (int i = 0; i < 50; i++) REQUIRE(Fill(a).bucket >= 3);
  for (uint64_t b = 0; b < 3; b++) REQUIRE_FALSE(a.Valid(b * kBucket, 0));
  RequireConsistent(a);
}

TEST_CASE("reclaiming a bucket bumps its generation so old pointers are no longer valid") {
  BucketAllocator a(Opts(2));
  Space old = Ok(Done(a, a.Allocate(0, 4096, kLru)));
  REQUIRE(old.bucket == 0);
  Fill(a);  // bucket 0 closed; bucket 1 open
  REQUIRE(a.Valid(old.cache_offset, old.gen));
  Space reused = Fill(a);  // nothing free: bucket 0 is reclaimed
  REQUIRE(reused.bucket == 0);
  REQUIRE(reused.gen == static_cast<uint8_t>(old.gen + 1));
  REQUIRE_FALSE(a.Valid(old.cache_offset, old.gen));
  REQUIRE(a.Valid(reused.cache_offset, reused.gen));
  REQUIRE(a.Valid(old.cache_offset + 4096, reused.gen));  // the whole bucket is the new data's
}

TEST_CASE("Valid answers false for free, metadata and out-of-range buckets") {
  BucketAllocator a(Opts(4, 1));
  REQUIRE_FALSE(a.Valid(0, 0));  // free
  Space m = Ok(a.AllocateMetadata());
  REQUIRE_FALSE(a.Valid(m.cache_offset, m.gen));
  REQUIRE_FALSE(a.Valid(100 * kBucket, 0));
}

TEST_CASE("data cannot take the metadata reserve but metadata can") {
  BucketAllocator a(Opts(4, 3));
  Space d = Fill(a);  // 4 free > 3 reserved: fine
  // 3 free: a new data bucket would dig into the reserve, and the only data
  // bucket is open, so there is nothing to reclaim.
  auto r = Done(a, a.Allocate(0, kBucket, kLru));
  REQUIRE(r.status().IsNoSpace());
  REQUIRE(a.usage().free == 3);
  for (int i = 0; i < 3; i++) {
    auto m = a.AllocateMetadata();
    REQUIRE(m.ok());
    REQUIRE(m->bucket != d.bucket);
  }
  BucketAllocator::Usage u = a.usage();
  REQUIRE(u.free == 0);
  REQUIRE(u.metadata == 3);
  REQUIRE(u.data == 1);
  REQUIRE(a.AllocateMetadata().status().IsNoSpace());  // the open data bucket is not taken either
  REQUIRE(a.Valid(d.cache_offset, d.gen));
  RequireConsistent(a);
}

TEST_CASE("data reclaims rather than shrink the reserve") {
  BucketAllocator a(Opts(10, 3));
  std::vector<Space> first;
  for (int i = 0; i < 7; i++) first.push_back(Fill(a));
  REQUIRE(a.usage().free == 3);
  Space more = Fill(a);  // reclaims a closed data bucket instead
  BucketAllocator::Usage u = a.usage();
  REQUIRE(u.free == 3);
  REQUIRE(u.data == 7);
  REQUIRE(std::count_if(first.begin(), first.end(),
                        [&](const Space& s) { return !a.Valid(s.cache_offset, s.gen); }) == 1);
  REQUIRE(a.Valid(more.cache_offset, more.gen));
  // Metadata takes the reserve, then reclaims data once the reserve is gone.
  for (int i = 0; i < 4; i++) REQUIRE(a.AllocateMetadata().ok());
  u = a.usage();
  REQUIRE(u.metadata == 4);
  REQUIRE(u.data == 6);
  RequireConsistent(a);
}

TEST_CASE("lru reclaims the least recently touched bucket") {
  BucketAllocator a(Opts(4));
  Space b0 = Fill(a), b1 = Fill(a), b2 = Fill(a), b3 = Fill(a);  // b3 stays open
  REQUIRE(std::vector<uint32_t>{b0.bucket, b1.bucket, b2.bucket, b3.bucket} ==
          std::vector<uint32_t>{0, 1, 2, 3});
  for (int i = 0; i < 3; i++) a.DecayPriorities();
  a.Touch(1);
  a.DecayPriorities();
  a.Touch(0);
  // Priorities now: 0 touched last, 1 before it, 2 never (3 never, but open).
  REQUIRE(Fill(a, kLru).bucket == 2);
  REQUIRE(Fill(a, kLru).bucket == 3);  // closed now; older than 1 and 0
  REQUIRE(Fill(a, kLru).bucket == 1);
  REQUIRE(Fill(a, kLru).bucket == 0);
  RequireConsistent(a);
}

TEST_CASE("fifo reclaims the oldest filled bucket, whatever was touched") {
  BucketAllocator a(Opts(4));
  for (int i = 0; i < 4; i++) Fill(a);
  a.Touch(0);
  a.Touch(1);
  for (int i = 0; i < 3; i++) a.DecayPriorities();
  a.Touch(0);
  REQUIRE(Fill(a, kFifo).bucket == 0);
  REQUIRE(Fill(a, kFifo).bucket == 1);
  REQUIRE(Fill(a, kFifo).bucket == 2);
  REQUIRE(Fill(a, kFifo).bucket == 3);
  REQUIRE(Fill(a, kFifo).bucket == 0);  // refilled first, so oldest again
}

TEST_CASE("random reclaims some closed data bucket, and not always the same one") {
  BucketAllocator a(Opts(8, 0, 1, 1));
  Space m1 = Ok(a.AllocateMetadata());
  Space m2 = Ok(a.AllocateMetadata());
  std::set<uint32_t> victims;
  uint32_t open = Fill(a, kRandom).bucket;
  for (int i = 0; i < 300; i++) {
    Space s = Fill(a, kRandom);
    REQUIRE(s.bucket != 0);  // reserved
    REQUIRE(s.bucket != m1.bucket);
    REQUIRE(s.bucket != m2.bucket);
    REQUIRE(s.bucket != open);  // the writer's open bucket is kept until it moves on
    open = s.bucket;
    if (i >= 4) victims.insert(s.bucket);  // buckets 4..7 came off the free list first
    a.MarkGcDone();
  }
  REQUIRE(victims.size() >= 3);
  REQUIRE(a.usage().metadata == 2);
  RequireConsistent(a);
}

TEST_CASE("open buckets are never reclaimed, even with the lowest priority") {
  BucketAllocator a(Opts(4, 0, 2));
  Space w0 = Ok(Done(a, a.Allocate(0, 4096, kLru)));  // writer 0 keeps this bucket open
  for (int i = 0; i < 10; i++) a.DecayPriorities();
  for (int i = 0; i < 20; i++) {
    for (ReplacementPolicy p : {kLru, kFifo, kRandom}) {
      Space s = Fill(a, p, 1);
      REQUIRE(s.bucket != w0.bucket);
    }
  }
  REQUIRE(a.Valid(w0.cache_offset, w0.gen));
  REQUIRE(Done(a, a.Allocate(0, 4096, kLru))->cache_offset == w0.cache_offset + 4096);
}

TEST_CASE("NoSpace when every bucket is open or metadata") {
  SECTION("all open") {
    BucketAllocator a(Opts(3, 0, 3));
    for (unsigned w = 0; w < 3; w++) REQUIRE(Done(a, a.Allocate(w, 4096, kLru)).ok());
    for (ReplacementPolicy p : {kLru, kFifo, kRandom})
      REQUIRE(Done(a, a.Allocate(0, kBucket, p)).status().IsNoSpace());
    REQUIRE(a.AllocateMetadata().status().IsNoSpace());
    RequireConsistent(a);
  }
  SECTION("all metadata") {
    BucketAllocator a(Opts(3));
    for (int i = 0; i < 3; i++) REQUIRE(a.AllocateMetadata().ok());
    for (ReplacementPolicy p : {kLru, kFifo, kRandom})
      REQUIRE(Done(a, a.Allocate(0, 4096, p)).status().IsNoSpace());
    REQUIRE(a.AllocateMetadata().status().IsNoSpace());
    a.FreeMetadata(1);
    REQUIRE(Done(a, a.Allocate(0, 4096, kLru))->bucket == 1);
  }
  SECTION("nothing but reserved buckets") {
    BucketAllocator a(Opts(2, 0, 1, 2));
    for (ReplacementPolicy p : {kLru, kFifo, kRandom})
      REQUIRE(Done(a, a.Allocate(0, 4096, p)).status().IsNoSpace());
    REQUIRE(a.AllocateMetadata().status().IsNoSpace());
  }
}

TEST_CASE("a bucket whose generation ran kMaxGenLead ahead of its last GC waits for MarkGcDone") {
  // Two buckets, one writer: each full-bucket allocation reclaims the other
  // bucket, so generations climb alternately until both are kMaxGenLead
  // ahead of GC.
  BucketAllocator a(Opts(2));
  Space first = Fill(a);
  int ok = 1;
  Result<Space> r = Space{};
  while ((r = Done(a, a.Allocate(0, kBucket, kLru))).ok()) {
    ok++;
    REQUIRE(ok < 1000);
  }
  REQUIRE(r.status().IsNoSpace());
  REQUIRE(ok == 2 + 2 * BucketAllocator::kMaxGenLead);
  for (ReplacementPolicy p : {kFifo, kRandom})
    REQUIRE(Done(a, a.Allocate(0, kBucket, p)).status().IsNoSpace());
  a.MarkGcDone();
  auto after = Done(a, a.Allocate(0, kBucket, kLru));
  REQUIRE(after.ok());
  REQUIRE(after->bucket == first.bucket);
  REQUIRE(int{after->gen} == BucketAllocator::kMaxGenLead + 1);
  REQUIRE_FALSE(a.Valid(first.cache_offset, first.gen));
}

TEST_CASE("freeing a metadata bucket returns it with a new generation") {
  BucketAllocator a(Opts(4));
  Space m = Ok(a.AllocateMetadata());
  REQUIRE(a.usage().metadata == 1);
  a.FreeMetadata(m.bucket);
  REQUIRE(a.usage().metadata == 0);
  REQUIRE(a.usage().free == 4);
  Space again = Ok(a.AllocateMetadata());
  REQUIRE(again.bucket == m.bucket);
  REQUIRE(again.gen == static_cast<uint8_t>(m.gen + 1));
  a.FreeMetadata(2);  // not metadata: ignored
  RequireConsistent(a);
}

TEST_CASE("metadata churn does not wrap a generation back onto a stale data pointer") {
  // Regression: FreeMetadata bumped the generation without the kMaxGenLead
  // check, so 255 metadata free/alloc cycles of one bucket without GC
  // wrapped its 8-bit generation and made a data pointer from its first
  // life valid again.
  for (int cycles : {254, 510}) {
    INFO(cycles << " cycles");
    BucketAllocator a(Opts(2));
    Space stale = Fill(a);
    REQUIRE(stale.bucket == 0);
    Fill(a);                             // bucket 1 open; bucket 0 closed
    Space m = Ok(a.AllocateMetadata());  // reclaims bucket 0
    REQUIRE(m.bucket == 0);
    for (int i = 0; i < cycles; i++) {
      a.FreeMetadata(m.bucket);
      m = Ok(a.AllocateMetadata());
      REQUIRE(m.bucket == 0);
    }
    a.FreeMetadata(m.bucket);
    auto reused = Done(a, a.Allocate(0, kBucket, kLru));  // the writer moves onto bucket 0
    REQUIRE(reused.ok());
    REQUIRE(reused->bucket == 0);
    REQUIRE_FALSE(a.Valid(stale.cache_offset, stale.gen));
    REQUIRE(static_cast<uint8_t>(reused->gen - stale.gen) <= BucketAllocator::kMaxGenLead);
  }
}

TEST_CASE("after GC, freeing metadata advances the generation again") {
  BucketAllocator a(Opts(2));
  Space m = Ok(a.AllocateMetadata());
  for (int i = 0; i < 200; i++) {
    a.FreeMetadata(m.bucket);
    m = Ok(a.AllocateMetadata());
  }
  REQUIRE(int{m.gen} == BucketAllocator::kMaxGenLead);
  a.MarkGcDone();
  a.FreeMetadata(m.bucket);
  Space next = Ok(a.AllocateMetadata());
  REQUIRE(next.bucket == m.bucket);
  REQUIRE(int{next.gen} == BucketAllocator::kMaxGenLead + 1);
}

TEST_CASE("priorities land in exact histogram bins and move with Touch and decay") {
  BucketAllocator a(Opts(4));
  Fill(a);
  Fill(a);
  const unsigned top = BucketAllocator::kInitialPrio;
  REQUIRE(a.prio_histogram()[top] == 2);
  a.DecayPriorities();
  REQUIRE(a.prio_histogram()[top - 1] == 2);
  a.Touch(0);
  REQUIRE(a.prio_histogram()[top] == 1);
  REQUIRE(a.prio_histogram()[top - 1] == 1);
  for (int i = 0; i < 40000; i++) a.DecayPriorities();  // floors at 0
  REQUIRE(a.prio_histogram()[0] == 2);
  a.Touch(3);  // free: no effect
  REQUIRE(HistogramSum(a) == 2);
}

TEST_CASE("priority_stats reports bcache's percentages and age quantiles without a scan") {
  BucketAllocator a(Opts(4));  // 4 buckets, none reserved
  Fill(a);
  Fill(a);
  a.DecayPriorities();
  a.DecayPriorities();
  a.Touch(0);  // bucket 0 age 0, bucket 1 age 2
  BucketAllocator::PriorityStats ps = a.priority_stats();
  REQUIRE(ps.clean_percent == 50);
  REQUIRE(ps.unused_percent == 50);
  REQUIRE(ps.dirty_percent == 0);
  REQUIRE(ps.metadata_percent == 0);
  REQUIRE(ps.average == 1);
  REQUIRE(ps.bytes_per_quantile == 2 * a.options().bucket_size / 32);
  // Ranks 2*(i+1)/32: the first 15 quantiles fall on the youngest bucket.
  REQUIRE(ps.quantiles[0] == 0);
  REQUIRE(ps.quantiles[14] == 0);
  REQUIRE(ps.quantiles[15] == 2);
  REQUIRE(ps.quantiles[30] == 2);
}

TEST_CASE("usage counts and the priority histogram stay consistent across random operations") {
  for (uint64_t seed = 1; seed <= 20; seed++) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const uint32_t n = 4 + rng() % 12;
    BucketAllocator a(
        Opts(n, static_cast<uint32_t>(rng() % 3), 1 + rng() % 3, static_cast<uint32_t>(rng() % 2)));
    const unsigned writers = a.options().writers;
    std::vector<uint32_t> metadata;
    // The newest pointer handed out for each (bucket, gen).
    std::vector<Space> pointers;
    std::map<uint32_t, uint8_t> latest_gen;  // of the last space handed out per bucket
    for (int op = 0; op < 3000; op++) {
      switch (rng() % 8) {
        case 0:
        case 1:
        case 2: {
          ReplacementPolicy p = static_cast<ReplacementPolicy>(rng() % 3);
          auto r = Done(a, a.Allocate(static_cast<unsigned>(rng() % writers), 1 + rng() % kBucket, p));
          if (r.ok()) {
            REQUIRE(a.Valid(r->cache_offset, r->gen));
            REQUIRE(r->cache_offset / kBucket == r->bucket);
            pointers.push_back(*r);
            latest_gen[r->bucket] = r->gen;
          } else {
            REQUIRE(r.status().IsNoSpace());
          }
          break;
        }
        case 3: {
          auto r = a.AllocateMetadata();
          if (r.ok()) {
            metadata.push_back(r->bucket);
            latest_gen[r->bucket] = r->gen;
          }
          break;
        }
        case 4:
          if (!metadata.empty()) {
            size_t i = rng() % metadata.size();
            a.FreeMetadata(metadata[i]);
            metadata.erase(metadata.begin() + static_cast<long>(i));
          }
          break;
        case 5:
          a.Touch(static_cast<uint32_t>(rng() % n));
          break;
        case 6:
          a.DecayPriorities();
          break;
        case 7:
          if (rng() % 8 == 0) a.MarkGcDone();
          break;
      }
      RequireConsistent(a);
      REQUIRE(a.usage().metadata == metadata.size());
      if (op % 50 == 0) {
        // A pointer is valid only if its bucket holds data of the same
        // generation as the last space handed out from it.
        for (const Space& s : pointers)
          if (a.Valid(s.cache_offset, s.gen)) REQUIRE(latest_gen[s.bucket] == s.gen);
      }
    }
  }
}

TEST_CASE("concurrent Allocate from 4 threads hands out non-overlapping space") {
  constexpr unsigned kThreads = 4;
  SECTION("room for everything: no space is handed out twice") {
    BucketAllocator a(Opts(2000, 8, kThreads, 1));
    std::vector<std::vector<Space>> got(kThreads);
    std::vector<std::vector<uint64_t>> lens(kThreads);
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < kThreads; t++)
      ts.emplace_back([&, t] {
        std::mt19937_64 rng(t);
        for (int i = 0; i < 5000; i++) {
          uint64_t len = 512 * (1 + rng() % 16);
          auto r = Done(a, a.Allocate(t, len, kLru));
          if (!r.ok()) return;
          got[t].push_back(*r);
          lens[t].push_back(len);
        }
      });
    for (auto& t : ts) t.join();
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (unsigned t = 0; t < kThreads; t++) {
      REQUIRE(got[t].size() == 5000);
      for (size_t i = 0; i < got[t].size(); i++)
        ranges.emplace_back(got[t][i].cache_offset, got[t][i].cache_offset + lens[t][i]);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); i++) REQUIRE(ranges[i - 1].second <= ranges[i].first);
    REQUIRE(ranges.front().first >= kBucket);                               // first_bucket honoured
    for (auto& [b, e] : ranges) REQUIRE(b / kBucket == (e - 1) / kBucket);  // no straddling
    RequireConsistent(a);
  }
  SECTION("with reclaim: no space is handed out twice within one generation") {
    BucketAllocator a(Opts(12, 2, kThreads));
    std::vector<std::vector<std::tuple<uint64_t, uint64_t, uint8_t>>> got(kThreads);
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < kThreads; t++)
      ts.emplace_back([&, t] {
        std::mt19937_64 rng(100 + t);
        for (int i = 0; i < 200000; i++) {
          uint64_t len = 4096 * (1 + rng() % 8);
          auto r = a.Allocate(t, len, static_cast<ReplacementPolicy>(rng() % 3));
          if (!r.ok()) return;
          a.WriteDone(r->bucket);  // every generation used up: no wrap, so (bucket, gen) is unique
          got[t].emplace_back(r->cache_offset, len, r->gen);
        }
      });
    for (auto& t : ts) t.join();
    std::map<std::pair<uint64_t, uint8_t>, std::vector<std::pair<uint64_t, uint64_t>>> by_gen;
    size_t total = 0;
    for (auto& v : got)
      for (auto& [off, len, gen] : v) {
        by_gen[{off / kBucket, gen}].emplace_back(off, off + len);
        total++;
      }
    REQUIRE(total > 1000);
    for (auto& [key, ranges] : by_gen) {
      std::sort(ranges.begin(), ranges.end());
      for (size_t i = 1; i < ranges.size(); i++) REQUIRE(ranges[i - 1].second <= ranges[i].first);
    }
    RequireConsistent(a);
  }
}

// ---- incremental reclaim ----

namespace {

// Fills every usable bucket with data (writer 0), leaving the free list empty.
void FillAll(BucketAllocator& a, ReplacementPolicy p = kLru) {
  while (a.usage().free > 0) Fill(a, p);
}

}  // namespace

TEST_CASE("Refill tops the free list up to its target with the least recently used buckets") {
  BucketAllocator a(Opts(1024));
  REQUIRE(a.free_target() == 8);  // 1024 / 128
  FillAll(a);
  // Age everything, then hit some buckets: they must survive the refill.
  for (int i = 0; i < 3; i++) a.DecayPriorities();
  std::set<uint32_t> hot;
  for (uint32_t b = 100; b < 1000; b += 2) {
    a.Touch(b);
    hot.insert(b);
  }
  size_t got = a.Refill(kLru);
  REQUIRE(got == 8);
  REQUIRE(a.usage().free == 8);
  REQUIRE(a.usage().reclaimed_background == 8);
  // Nothing more to do while the free list is at its target.
  REQUIRE(a.Refill(kLru) == 0);
  // The next allocations come off the refilled list: none of them is hot,
  // and none needed a foreground reclaim.
  for (int i = 0; i < 7; i++) REQUIRE(hot.count(Fill(a).bucket) == 0);
  REQUIRE(a.usage().reclaimed_foreground == 0);
  RequireConsistent(a);
}

TEST_CASE("Refill with fifo takes the oldest filled buckets") {
  BucketAllocator a(Opts(1024));
  std::vector<uint32_t> order;
  while (a.usage().free > 0) order.push_back(Fill(a, kFifo).bucket);
  REQUIRE(a.Refill(kFifo) == 8);
  std::set<uint32_t> oldest(order.begin(), order.begin() + 8);
  for (int i = 0; i < 8; i++) REQUIRE(oldest.count(Fill(a, kFifo).bucket) == 1);
}

TEST_CASE("buckets GC found empty are reclaimed before any other") {
  BucketAllocator a(Opts(1024));
  FillAll(a);
  for (int i = 0; i < 5; i++) a.DecayPriorities();
  // Buckets 500..507 hold nothing live, though they were hit just now.
  std::vector<uint32_t> live(1024, 4096);
  for (uint32_t b = 500; b < 508; b++) {
    live[b] = 0;
    a.Touch(b);
  }
  a.SetLiveBytes(live, a.fill_seq() + 1);
  REQUIRE(a.Refill(kLru) == 8);
  std::set<uint32_t> got;
  for (int i = 0; i < 8; i++) got.insert(Fill(a).bucket);
  REQUIRE(got == std::set<uint32_t>{500, 501, 502, 503, 504, 505, 506, 507});
  // A bucket filled after the GC started is not taken for empty.
  BucketAllocator b(Opts(64));
  FillAll(b);
  std::vector<uint32_t> none(64, 0);
  b.SetLiveBytes(none, 0);  // GC "started" before anything was filled
  b.Touch(3);
  for (int i = 0; i < 3; i++) b.DecayPriorities();
  b.Touch(9);  // 9 is the only hot bucket
  REQUIRE(b.Refill(kLru) == b.free_target());
  for (uint32_t i = 0; i < b.free_target(); i++) REQUIRE(Fill(b).bucket != 9);
}

TEST_CASE("usage counts the buckets GC found empty as dead until each is reclaimed, and an open bucket is not dead") {
  BucketAllocator a(Opts(1024, 0, 2));
  FillAll(a);
  CHECK(a.usage().dead == 0);
  // Writer 1 keeps a bucket open across the GC pass.
  auto open = Ok(a.Allocate(1, kBucket / 4, kLru));
  std::vector<uint32_t> live(1024, 4096);
  for (uint32_t b = 100; b < 140; b++) live[b] = 0;
  live[open.bucket] = 0;  // GC walked the index before the writer's data landed
  a.SetLiveBytes(live, a.fill_seq() + 1);
  CHECK(a.usage().dead == 40);
  // Reclaim takes dead buckets first, and each one taken leaves the count.
  size_t reclaimed = a.Refill(kLru);
  REQUIRE(reclaimed > 0);
  REQUIRE(reclaimed <= 40);
  CHECK(a.usage().dead == 40 - reclaimed);
  for (size_t i = 0; i < reclaimed; i++) {
    uint32_t b = Fill(a).bucket;
    CHECK(b >= 100);
    CHECK(b < 140);
  }
  a.WriteDone(open.bucket);
  CHECK(a.usage().dead == 40 - reclaimed);
  // The next pass replaces the count.
  a.SetLiveBytes(std::vector<uint32_t>(1024, 4096), a.fill_seq() + 1);
  CHECK(a.usage().dead == 0);
}

TEST_CASE("a foreground reclaim scans one window, not the whole cache") {
  // 1M buckets, all data, empty free list, no refill thread: every
  // allocation must reclaim for itself, from at most kScanChunk buckets.
  constexpr uint32_t kN = 1u << 20;
  BucketAllocator a(Opts(kN));
  for (uint32_t i = 0; i < kN; i++) Fill(a);
  REQUIRE(a.usage().free == 0);
  std::vector<uint64_t> ns;
  for (int i = 0; i < 2000; i++) {
    auto t0 = std::chrono::steady_clock::now();
    Fill(a);
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - t0).count());
  }
  REQUIRE(a.usage().reclaimed_foreground == 2000);
  std::sort(ns.begin(), ns.end());
  WARN("allocation with foreground reclaim, 1M buckets: p50 " << ns[1000] << " ns, p99 " << ns[1980]
       << " ns, max " << ns.back() << " ns");
  // p99 < 1 ms on a loaded machine (optimized build); a full scan takes ~5 ms.
  REQUIRE(ns[1980] < 1'000'000 * test::kTimingScale);
  RequireConsistent(a);
}

TEST_CASE("whole-cache passes never hold the allocator for long: allocations stay fast meanwhile") {
  constexpr uint32_t kN = 1u << 20;
  BucketAllocator a(Opts(kN, 0, 2));
  for (uint32_t i = 0; i < kN; i++) Fill(a);
  a.StartRefill([] { return kLru; });
  std::atomic<bool> stop{false};
  std::thread passes([&] {
    while (!stop.load()) {
      a.DecayPriorities();
      std::vector<uint8_t> gens = a.GenSnapshot();
      a.MarkGcDone(gens);
      a.SetLiveBytes(std::vector<uint32_t>(kN, 1), a.fill_seq());
    }
  });
  std::vector<uint64_t> ns;
  for (int i = 0; i < 20000; i++) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = Done(a, a.Allocate(1, kBucket / 4, kLru));
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - t0).count());
    REQUIRE(r.ok());
  }
  stop = true;
  passes.join();
  a.StopRefill();
  std::sort(ns.begin(), ns.end());
  WARN("Allocate under concurrent decay/GC bookkeeping/refill on 1M buckets: p50 " << ns[10000]
       << " ns, p99 " << ns[19800] << " ns, max " << ns.back() << " ns");
  REQUIRE(ns[19800] < 1'000'000 * test::kTimingScale);
  REQUIRE(a.usage().reclaimed_background > 0);
  RequireConsistent(a);
}

TEST_CASE("a bucket with a cache write in flight is never reclaimed, even closed and coldest") {
  BucketAllocator a(Opts(4));
  Space pending = Ok(a.Allocate(0, kBucket, kLru));  // its write has not completed
  for (int i = 0; i < 10; i++) a.DecayPriorities();  // the coldest bucket there is
  Fill(a);                                             // closes it: the writer moved on
  Fill(a);
  Fill(a);
  // Every other bucket is taken; the next allocation must reclaim one of
  // them, never the bucket whose write is still in flight.
  for (int i = 0; i < 6; i++) REQUIRE(Fill(a).bucket != pending.bucket);
  REQUIRE(a.Valid(pending.cache_offset, pending.gen));
  a.WriteDone(pending.bucket);
  for (int i = 0; i < 10; i++) a.DecayPriorities();
  bool taken = false;
  for (int i = 0; i < 4 && !taken; i++) taken = Fill(a).bucket == pending.bucket;
  REQUIRE(taken);  // once the write is done it goes like any other
  RequireConsistent(a);
}

TEST_CASE("a data allocation while the refill thread journals generations waits for it instead of going uncached") {
  BucketAllocator a(Opts(64));
  FillAll(a);  // the free list is empty: the next allocation needs a reclaimed bucket
  std::atomic<bool> persisting{false}, release{false};
  a.SetGenPersister([&](const std::vector<std::pair<uint32_t, uint8_t>>&) {
    persisting = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return Status::OK();
  });
  std::thread refill([&] { a.Refill(kLru); });
  while (!persisting) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release = true;
  });
  // Before: NoSpace ("buckets are being reclaimed"), so a burst of writes
  // right after a start went uncached whenever the refill thread journaled.
  auto r = a.Allocate(0, kBucket, kLru);
  REQUIRE(r.ok());
  REQUIRE(release.load());  // it did wait for the journal write
  a.WriteDone(r->bucket);
  refill.join();
  releaser.join();
  RequireConsistent(a);
}

TEST_CASE("on a serving reactor an allocation that needs a journaled generation parks instead of waiting") {
  BucketAllocator a(Opts(64));
  FillAll(a);  // the free list is empty: the next allocation needs a reclaimed bucket
  std::atomic<int> persists{0};
  a.SetGenPersister([&](const std::vector<std::pair<uint32_t, uint8_t>>&) {
    persists++;
    return Status::OK();
  });
  auto reactor = Reactor::Create(64);
  REQUIRE(reactor.ok());
  (*reactor)->Bind();
  bool woken = false, space = false;
  {
    ServingThreadScope serving;
    auto r = a.Allocate(0, kBucket, kLru);
    REQUIRE(r.status().IsWouldBlock());
    CHECK(persists == 0);  // nothing journaled, nothing waited for, on this thread
    REQUIRE(a.ParkForSpace([&](bool s) {
      woken = true;
      space = s;
    }));
  }
  CHECK_FALSE(woken);
  a.Refill(kLru);  // the refill thread's turn: it journals the reclaimed generations
  CHECK(persists >= 1);
  (*reactor)->RunUntil([&] { return woken; });  // posted back to the parked reactor
  CHECK(space);
  {
    ServingThreadScope serving;
    auto r = a.Allocate(0, kBucket, kLru);
    REQUIRE(r.ok());
    a.WriteDone(r->bucket);
  }
  RequireConsistent(a);
}
