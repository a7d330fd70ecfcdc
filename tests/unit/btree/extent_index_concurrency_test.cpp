// SPDX-License-Identifier: Apache-2.0
// Several threads at once, as the reactors will call the index: disjoint
// ranges (each thread checks its own oracle), overlapping ranges (every
// answer must be some thread's write, never a mix within one block), with
// commits, checkpoints, ForEach and stats running beside them and a tiny
// node cache. Run under TSan: cmake --preset tsan && build-tsan/tests/unit_btree.
#include <catch2/catch.hpp>

#include <atomic>
#include <random>
#include <thread>

#include "btree/extent_index.h"
#include "btree/mem_node_store.h"
#include "tests/unit/btree/index_test_support.h"

using namespace ubcache;
using namespace ubcache::testing;

namespace {

constexpr int kThreads = 4;
constexpr uint64_t kRegion = 2048;  // blocks per thread in the disjoint test
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UB_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(UB_TSAN)
constexpr int kOpsPerThread = 8000;
#else
constexpr int kOpsPerThread = 40000;
#endif

struct Slot {
  bool present = false;
  uint64_t cache_blk = 0;
};

// Commits, checkpoints, full scans and stats reads while the writers run.
void Background(ExtentIndex* idx, std::atomic<bool>* stop, IndexRoot* root, Mutex* root_mu) {
  uint64_t i = 0;
  while (!stop->load()) {
    REQUIRE(idx->Commit().ok());
    if (++i % 8 == 0) {
      auto r = idx->Checkpoint([&](const IndexRoot& nr) {
        MutexLock l(root_mu);
        *root = nr;
        return Status::OK();
      });
      REQUIRE(r.ok());
    }
    if (i % 16 == 0) {
      uint64_t n = 0;
      REQUIRE(idx->ForEach([&](const Extent&) { n++; }).ok());
    }
    (void)idx->stats();
    std::this_thread::yield();
  }
}

}  // namespace

TEST_CASE("four threads on disjoint ranges each see exactly their own writes") {
  MemNodeStore store(2048);
  ExtentIndex::Options o;
  o.shards = 8;
  o.stripe_bytes = 64 * 1024;  // each region spans many stripes, shared shards
  o.cache_bytes = 64 * 1024;
  auto idx = MustCreate(&store, o);
  IndexRoot root = idx->Checkpoint().value();
  Mutex root_mu;
  std::atomic<bool> stop{false};
  std::vector<std::vector<Slot>> oracle(kThreads, std::vector<Slot>(kRegion));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t + 100);
      auto& mine = oracle[t];
      uint64_t base = t * kRegion;
      for (int i = 0; i < kOpsPerThread; i++) {
        uint64_t len = 1 + rng() % 32;
        uint64_t off = rng() % (kRegion - len);
        uint64_t op = rng() % 10;
        if (op < 5) {
          uint64_t cb = rng() % (1 << 20);
          if (!idx->Insert(Ext(0, base + off, len, cb)).ok()) failures++;
          for (uint64_t b = 0; b < len; b++) mine[off + b] = Slot{true, cb + b};
        } else if (op < 7) {
          if (!idx->Invalidate(0, (base + off) * K, len * K).ok()) failures++;
          for (uint64_t b = 0; b < len; b++) mine[off + b] = Slot{};
        } else {
          std::vector<Extent> out;
          if (!idx->Lookup(0, (base + off) * K, len * K, &out).ok()) failures++;
          std::vector<Slot> got(len);
          for (const Extent& e : out) {
            for (uint64_t b = 0; b < e.len / K; b++) {
              got[e.start / K - base - off + b] = Slot{true, e.cache_offset / K + b};
            }
          }
          for (uint64_t b = 0; b < len; b++) {
            if (got[b].present != mine[off + b].present ||
                got[b].cache_blk != mine[off + b].cache_blk) {
              failures++;
            }
          }
        }
      }
    });
  }
  std::thread bg(Background, idx.get(), &stop, &root, &root_mu);
  for (auto& th : threads) th.join();
  stop = true;
  bg.join();
  CHECK(failures == 0);

  // Everything is committed now; a crash must give back exactly the oracle.
  REQUIRE(idx->Commit().ok());
  idx.reset();
  {
    MutexLock l(&root_mu);
    idx = MustOpen(&store, root, o);
  }
  for (int t = 0; t < kThreads; t++) {
    auto got = LookupAll(*idx, 0, t * kRegion, kRegion);
    std::vector<Slot> blocks(kRegion);
    for (const Extent& e : got) {
      for (uint64_t b = 0; b < e.len / K; b++) {
        blocks[e.start / K - t * kRegion + b] = Slot{true, e.cache_offset / K + b};
      }
    }
    for (uint64_t b = 0; b < kRegion; b++) {
      if (blocks[b].present != oracle[t][b].present ||
          blocks[b].cache_blk != oracle[t][b].cache_blk) {
        FAIL("thread " << t << " block " << b << " differs after reopen");
      }
    }
  }
}

TEST_CASE("four threads on overlapping ranges never see a torn or overlapping answer") {
  MemNodeStore store(2048);
  ExtentIndex::Options o;
  o.shards = 4;
  o.stripe_bytes = 64 * 1024;
  o.cache_bytes = 32 * 1024;
  auto idx = MustCreate(&store, o);
  IndexRoot root = idx->Checkpoint().value();
  Mutex root_mu;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<uint64_t> collisions{0};
  constexpr uint64_t kSpan = 512;
  // A block b written by thread t always maps to cache block t<<24 | b, with
  // gen t: any answer that breaks this mixed two writes up.
  auto check = [&](const std::vector<Extent>& out, uint64_t off, uint64_t len) {
    uint64_t prev_end = off * K;
    for (const Extent& e : out) {
      if (e.start < prev_end || e.end() > (off + len) * K) failures++;
      prev_end = e.end();
      if (e.cache_offset / K != (uint64_t{e.gen} << 24 | e.start / K)) failures++;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t + 7);
      for (int i = 0; i < kOpsPerThread; i++) {
        uint64_t len = 1 + rng() % 48;
        uint64_t off = rng() % (kSpan - len);
        Extent e = Ext(1, off, len, uint64_t(t) << 24 | off, static_cast<uint8_t>(t));
        uint64_t op = rng() % 10;
        if (op < 4) {
          if (!idx->Insert(e).ok()) failures++;
        } else if (op < 5) {
          if (!idx->Invalidate(1, off * K, len * K).ok()) failures++;
        } else if (op < 7) {
          // The read-miss protocol: sequence, "read the backing device", insert.
          uint64_t since = idx->Sequence(1, off * K, len * K);
          bool inserted = false;
          if (!idx->InsertIfUnchanged(e, since, &inserted).ok()) failures++;
          if (!inserted) collisions++;
        } else {
          std::vector<Extent> out;
          if (!idx->Lookup(1, off * K, len * K, &out).ok()) failures++;
          check(out, off, len);
        }
      }
    });
  }
  std::thread bg(Background, idx.get(), &stop, &root, &root_mu);
  for (auto& th : threads) th.join();
  stop = true;
  bg.join();
  CHECK(failures == 0);
  WARN("overlapping threads: " << collisions.load() << " InsertIfUnchanged collisions");

  auto before = AllExtents(*idx);
  check(LookupAll(*idx, 1, 0, kSpan), 0, kSpan);
  REQUIRE(idx->Commit().ok());
  idx.reset();
  {
    MutexLock l(&root_mu);
    idx = MustOpen(&store, root, o);
  }
  CHECK(AllExtents(*idx) == before);
}
