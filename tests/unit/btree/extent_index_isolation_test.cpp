// SPDX-License-Identifier: Apache-2.0
// Issue 29's bar for "a serving reactor never waits": a btree cache far
// smaller than an index of a million extents; on one serving reactor, one
// stream of requests misses index nodes while another reads resident data;
// the second's p99 stays within 2x of its p99 without the first.
//
// Each request is a lookup followed by a data read; node reads and data
// reads take a fixed device time on the reactor (timers), so what the
// streams share is the reactor alone. The same run with the missing
// stream's lookups made the way a reactor made them before (synchronous
// node reads on the reactor thread, the device time slept) is the control:
// it must break the bar, or the bar measures nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "backend/reactor.h"
#include "btree/extent_index.h"
#include "btree/mem_node_store.h"
#include "tests/unit/btree/index_test_support.h"
#include "tests/unit/timing.h"
#include "util/clock.h"
#include "util/thread.h"

using namespace ubcache;
using namespace ubcache::testing;

namespace {

#ifdef UBCACHE_TEST_SANITIZED
constexpr uint64_t kExtents = 200000;
#else
constexpr uint64_t kExtents = 1000000;
#endif
constexpr uint64_t kNodeReadNs = 10'000'000;  // a node read's device time (long: a clear control)
constexpr uint64_t kDataReadNs = 200'000;    // a data read's
constexpr int kHotRequests = 1500;           // per round of the resident stream

// Extent i: dev i&1, block 2*(i>>1), cache block i (no two touch).
uint64_t StartOf(uint64_t i) { return (i >> 1) * 2 * K; }

// A MemNodeStore with a device's read time: ReadNodeAsync completes
// kNodeReadNs later on the calling reactor; ReadNode (a synchronous read, as
// reactors made them before) sleeps that long when `slow_sync` is set.
class DeviceTimedStore final : public NodeStore {
 public:
  explicit DeviceTimedStore(uint32_t node_size) : mem_(node_size) {}
  uint32_t node_size() const override { return mem_.node_size(); }
  Result<uint64_t> AllocNode() override { return mem_.AllocNode(); }
  void FreeNode(uint64_t addr) override { mem_.FreeNode(addr); }
  Status WriteNode(uint64_t addr, const uint8_t* data) override { return mem_.WriteNode(addr, data); }
  Status ReadNode(uint64_t addr, uint8_t* data) override {
    if (slow_sync) std::this_thread::sleep_for(std::chrono::nanoseconds(kNodeReadNs));
    return mem_.ReadNode(addr, data);
  }
  void ReadNodeAsync(uint64_t addr, NodeReadDone done) override {
    auto buf = std::make_unique<std::vector<uint8_t>>(node_size());
    Status st = mem_.ReadNode(addr, buf->data());
    Reactor::Current()->RunAt(NowNanos() + kNodeReadNs,
                              [buf = std::move(buf), st, done = std::move(done)]() mutable {
                                done(st, st.ok() ? buf->data() : nullptr);
                              });
  }
  Status AppendJournal(const uint8_t* data, size_t len) override {
    return mem_.AppendJournal(data, len);
  }
  Status ReadJournal(std::vector<uint8_t>* all) override { return mem_.ReadJournal(all); }
  Status TrimJournal() override { return mem_.TrimJournal(); }
  Status DiscardJournalTail(size_t valid) override { return mem_.DiscardJournalTail(valid); }
  bool slow_sync = false;

 private:
  MemNodeStore mem_;
};

// Two request streams at queue depth 1 on this thread's reactor.
class Streams {
 public:
  Streams(Reactor* r, ExtentIndex* idx) : r_(r), idx_(idx) {}

  // One round: `requests` requests of the resident stream, with the
  // missing stream running beside it or not. Returns the resident stream's
  // latencies (issue to completion, ns).
  std::vector<uint64_t> Round(bool missing_stream, bool missing_blocks, int requests = kHotRequests) {
    hot_lat_.clear();
    requests_ = static_cast<size_t>(requests);
    stop_ = false;
    blocks_ = missing_blocks;
    if (missing_stream) {
      cold_busy_ = true;
      Cold(rng_() % kExtents);
    }
    Hot();
    r_->RunUntil([&] { return stop_ && !cold_busy_; });
    return hot_lat_;
  }
  uint64_t cold_done() const { return cold_done_; }

 private:
  // The resident stream: one of 64 extents of one leaf, then a data read.
  void Hot() {
    uint64_t t0 = NowNanos();
    std::vector<Extent> out;
    uint64_t i = (rng_() % 32) * 2;  // dev 0
    Status st = idx_->Lookup(0, StartOf(i), K, &out);
    REQUIRE(st.ok());  // resident: never parks
    REQUIRE(out.size() == 1);
    r_->RunAt(NowNanos() + kDataReadNs, [this, t0] {
      hot_lat_.push_back(NowNanos() - t0);
      if (hot_lat_.size() < requests_)
        Hot();
      else
        stop_ = true;
    });
  }

  // The missing stream: any extent of the index, then a data read.
  void Cold(uint64_t i) {
    if (stop_) {
      cold_busy_ = false;
      return;
    }
    std::vector<Extent> out;
    Status st;
    if (blocks_) {
      ServingThreadScope as_before(false);  // synchronous node reads, here
      st = idx_->Lookup(i & 1, StartOf(i), K, &out);
    } else {
      st = idx_->Lookup(i & 1, StartOf(i), K, &out);
    }
    if (st.IsWouldBlock()) {
      idx_->LoadMissing([this, i](Status ls) {
        REQUIRE(ls.ok());
        Cold(i);
      });
      return;
    }
    REQUIRE(st.ok());
    REQUIRE(out.size() == 1);
    REQUIRE(out[0].cache_offset == i * K);
    cold_done_++;
    r_->RunAt(NowNanos() + kDataReadNs, [this] { Cold(rng_() % kExtents); });
  }

  Reactor* r_;
  ExtentIndex* idx_;
  std::mt19937_64 rng_{29};
  std::vector<uint64_t> hot_lat_;
  size_t requests_ = 0;
  bool stop_ = false, cold_busy_ = false, blocks_ = false;
  uint64_t cold_done_ = 0;
};

uint64_t P99(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() * 99 / 100];
}

}  // namespace

TEST_CASE("a stream missing index nodes leaves a resident stream's p99 within 2x") {
  DeviceTimedStore store(64 * 1024);
  ExtentIndex::Options o;
  o.journaled = false;
  IndexRoot root;
  {
    auto idx = MustCreate(&store, o);
    for (uint64_t i = 0; i < kExtents; i++) REQUIRE(idx->Insert(Ext(i & 1, StartOf(i) / K, 1, i)).ok());
    root = idx->Checkpoint([](const IndexRoot&) { return Status::OK(); }).value();
  }
  o.cache_bytes = 4 << 20;  // the index decoded is ~10x that
  auto idx = MustOpen(&store, root, o);
  auto reactor = Reactor::Create(64);
  REQUIRE(reactor.ok());
  (*reactor)->Bind();
  REQUIRE(LookupAll(*idx, 0, 0, 128).size() == 64);  // the resident stream's leaf
  store.slow_sync = true;

  ServingThreadScope serving;
  Streams s(reactor->get(), idx.get());
  std::vector<uint64_t> alone, beside;
  for (int round = 0; round < 2; round++) {  // alternated
    auto a = s.Round(false, false);
    auto b = s.Round(true, false);
    alone.insert(alone.end(), a.begin(), a.end());
    beside.insert(beside.end(), b.begin(), b.end());
  }
  uint64_t cold_parked = s.cold_done();
  // The control: the reactor waits for node reads (shorter: each of its
  // requests may wait a whole node read).
  auto blocked = s.Round(true, true, 200);
  uint64_t p_alone = P99(alone), p_beside = P99(beside), p_blocked = P99(blocked);
  auto st = idx->stats();
  WARN("resident stream p99: alone " << p_alone / 1000 << " us, beside a missing stream "
                                     << p_beside / 1000 << " us, beside one that waits "
                                     << p_blocked / 1000 << " us; the missing stream completed "
                                     << cold_parked << " requests, " << st.node_parks
                                     << " parks, " << st.node_reads << " node reads, cached "
                                     << st.cached_bytes / 1024 << " KiB of " << st.nodes
                                     << " nodes");
  CHECK(cold_parked > 20);  // it went on, missing nodes
  CHECK(st.node_parks > 20);
  // No resident request waited for a node read (kNodeReadNs) ...
  CHECK(p_beside < kNodeReadNs);
  CHECK(p_blocked > kNodeReadNs / 2);  // ... as one on a waiting reactor does
#ifndef UBCACHE_TEST_SANITIZED
  // The bar. Under a sanitizer the missing stream's CPU (decoding
  // the nodes it reads) is several times slower and alone can double a
  // resident request's wait: the bar is for optimized builds.
  CHECK(p_beside <= 2 * p_alone);
  CHECK(p_blocked > 2 * p_alone);  // the bar catches a reactor that waits
#endif
}
