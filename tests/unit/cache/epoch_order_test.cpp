// SPDX-License-Identifier: Apache-2.0
// Ordered writeback (writeback_order flush, doc/design.md rules 11-14), as a
// model test: random writes, overwrites, FLUSHes and FUA writes from one
// client, against a reference history, while the writeback thread runs.
// The backing device records every write that reaches it, and at each one
// the test checks that it holds a state a power cut could have left: for
// some epoch E, every block holds its last version from epochs < E or one
// of its versions from epoch E (tests/integration/epoch_check.py's rule,
// with the epochs known exactly: the client issues one request at a time).
// It also checks the flush between epochs: no write of epoch e reaches the
// backing device while a write of an older epoch is not yet covered by a
// completed backing flush. In `lba` order the same run must break the rule
// (else this test could not fail).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "backend/fault_device.h"
#include "backend/mem_device.h"
#include "backend/offset_device.h"
#include "backend/sync_io.h"
#include "cache/backing_super.h"
#include "cache/cache_set.h"
#include "cache/cached_device.h"
#include "cache/epoch_clock.h"
#include "cache/ordered_gate.h"
#include "cache/superblock.h"
#include "cache/writeback.h"
#include "util/aligned_buffer.h"
#include "util/endian.h"
#include "timing.h"

namespace ubcache {
namespace {

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kBlocks = 96;
constexpr uint64_t kSpacing = 40 << 10;  // blocks spread over ~4 stripes

// The client's history and the checks, shared by the client thread and the
// writeback thread (the recorder runs on it).
class History {
 public:
  // A write about to be issued: its id (>= 1) names its data.
  uint64_t Issue(uint64_t block, uint64_t epoch) {
    std::lock_guard<std::mutex> l(mu_);
    uint64_t id = writes_.size() + 1;
    writes_.push_back({block, epoch});
    versions_[block].push_back(id);
    return id;
  }
  // A discard or write-zeroes of `block` about to be issued: a version of
  // it whose data is zeros, named by its id as the backing device gets it.
  uint64_t IssueZero(uint64_t block, uint64_t epoch) {
    uint64_t id = Issue(block, epoch);
    std::lock_guard<std::mutex> l(mu_);
    zero_[block] = id;
    return id;
  }
  // A discard or write-zeroes reached the backing device / completed there.
  void ZeroSubmitted(uint64_t offset, uint64_t len) {
    std::lock_guard<std::mutex> l(mu_);
    for (uint64_t at = (offset + kSpacing - 1) / kSpacing * kSpacing; at < offset + len; at += kSpacing) {
      auto z = zero_.find(at / kSpacing);
      if (z != zero_.end()) SubmittedLocked(z->second);
    }
  }
  void ZeroCompleted(uint64_t offset, uint64_t len) {
    std::lock_guard<std::mutex> l(mu_);
    for (uint64_t at = (offset + kSpacing - 1) / kSpacing * kSpacing; at < offset + len; at += kSpacing) {
      auto z = zero_.find(at / kSpacing);
      if (z == zero_.end() || at / kSpacing >= kBlocks) continue;
      image_[at / kSpacing] = z->second;
      completed_.insert(z->second);
    }
    CheckImage();
  }
  // A write-zeroes the cache took as a write of zeros (CachedDevice, flush
  // order): writeback writes zeros, which name the block's zero op (each
  // block gets at most one in these tests).
  uint64_t ZeroAsIdLocked(uint64_t block, uint64_t id) {
    if (id != 0) return id;
    auto z = zero_.find(block);
    return z == zero_.end() ? 0 : z->second;
  }
  bool HasZero(uint64_t block) {
    std::lock_guard<std::mutex> l(mu_);
    return zero_.count(block) > 0;
  }
  // A discard the device answered without the backing device (skipped):
  // no version of the block after all.
  void Unissue(uint64_t block, uint64_t id) {
    std::lock_guard<std::mutex> l(mu_);
    auto& v = versions_[block];
    v.erase(std::remove(v.begin(), v.end(), id), v.end());
    zero_.erase(block);
  }
  bool IsZero(uint64_t id) {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [b, z] : zero_)
      if (z == id) return true;
    return false;
  }
  // A backing write (or flush) was submitted / completed.
  void Submitted(uint64_t offset, const uint8_t* data, uint64_t len) {
    std::lock_guard<std::mutex> l(mu_);
    for (uint64_t off = 0; off < len; off += kBlock) {
      if ((offset + off) % kSpacing != 0) continue;
      uint64_t id = ZeroAsIdLocked((offset + off) / kSpacing, LoadLE64(data + off));
      if (id == 0 || id > writes_.size()) continue;
      SubmittedLocked(id);
    }
  }
  void SubmittedLocked(uint64_t id) {
    uint64_t e = writes_[id - 1].epoch;
    for (const auto& [w, epoch] : unflushed_)
      if (epoch < e) Violation("a write of epoch " + std::to_string(e) + " reached the backing device before "
                               "epoch " + std::to_string(epoch) + " was flushed there");
    unflushed_.insert({id, e});
  }
  // A FUA write is durable when it completes: no flush needs to cover it.
  void Completed(uint64_t offset, const uint8_t* data, uint64_t len, bool fua) {
    std::lock_guard<std::mutex> l(mu_);
    for (uint64_t off = 0; off < len; off += kBlock) {
      uint64_t at = offset + off;
      if (at % kSpacing != 0 || at / kSpacing >= kBlocks) continue;
      uint64_t id = ZeroAsIdLocked(at / kSpacing, LoadLE64(data + off));
      image_[at / kSpacing] = id;
      completed_.insert(id);
      if (fua && id != 0 && id <= writes_.size()) unflushed_.erase({id, writes_[id - 1].epoch});
    }
    CheckImage();
  }
  // A flush covers the writes completed before it was submitted.
  std::set<uint64_t> FlushSubmitted() {
    std::lock_guard<std::mutex> l(mu_);
    return completed_;
  }
  void FlushCompleted(const std::set<uint64_t>& covered) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = unflushed_.begin(); it != unflushed_.end();)
      it = covered.count(it->first) ? unflushed_.erase(it) : std::next(it);
  }
  // The client got the write's ack at unix ms `ms`.
  void Acked(uint64_t id, uint64_t ms) {
    std::lock_guard<std::mutex> l(mu_);
    if (acked_ms_.size() < id) acked_ms_.resize(id, 0);
    acked_ms_[id - 1] = ms;
  }
  // Rule 16: the backing superblock is about to say consistent_as_of T
  // (unix s). Every write acknowledged before T must be on the backing
  // device already: each block holds it or a later version of its own.
  void CheckAsOf(uint64_t t) {
    std::lock_guard<std::mutex> l(mu_);
    as_of_checks_++;
    for (uint64_t b = 0; b < kBlocks; b++) {
      const std::vector<uint64_t>& v = versions_[b];
      size_t need = 0;  // 1 + index of the newest version acked before T
      for (size_t i = 0; i < v.size(); i++)
        if (v[i] <= acked_ms_.size() && acked_ms_[v[i] - 1] != 0 && acked_ms_[v[i] - 1] < t * 1000) need = i + 1;
      if (need == 0) continue;
      auto it = std::find(v.begin(), v.end(), image_[b]);
      size_t have = it == v.end() ? 0 : static_cast<size_t>(it - v.begin()) + 1;
      if (have < need)
        Violation("consistent_as_of " + std::to_string(t) + ": block " + std::to_string(b) + " lacks write " +
                  std::to_string(v[need - 1]) + ", acknowledged " +
                  std::to_string(t * 1000 - acked_ms_[v[need - 1] - 1]) + " ms before it");
    }
  }
  uint64_t as_of_checks() {
    std::lock_guard<std::mutex> l(mu_);
    return as_of_checks_;
  }
  uint64_t Latest(uint64_t block) {
    std::lock_guard<std::mutex> l(mu_);
    return versions_[block].empty() ? 0 : versions_[block].back();
  }
  uint64_t violations() {
    std::lock_guard<std::mutex> l(mu_);
    return violations_;
  }
  std::string first_violation() {
    std::lock_guard<std::mutex> l(mu_);
    return first_;
  }
  uint64_t checks() {
    std::lock_guard<std::mutex> l(mu_);
    return checks_;
  }

 private:
  struct Write {
    uint64_t block, epoch;
  };
  void Violation(const std::string& what) {
    if (violations_++ == 0) first_ = what;
  }
  // The rule: E must be >= the epoch of every block's present version and
  // <= the epoch of the version after it (a block still at its initial
  // content: <= its first version's epoch).
  void CheckImage() {
    checks_++;
    uint64_t lo = 0, hi = UINT64_MAX;
    std::string lo_why, hi_why;
    for (uint64_t b = 0; b < kBlocks; b++) {
      const std::vector<uint64_t>& v = versions_[b];
      uint64_t id = image_[b];
      size_t next = 0;
      if (id != 0) {
        auto it = std::find(v.begin(), v.end(), id);
        if (it == v.end()) {
          Violation("block " + std::to_string(b) + " holds write " + std::to_string(id) + ", not one of its own");
          return;
        }
        if (writes_[id - 1].epoch > lo) {
          lo = writes_[id - 1].epoch;
          lo_why = "block " + std::to_string(b) + " holds write " + std::to_string(id);
        }
        next = static_cast<size_t>(it - v.begin()) + 1;
      }
      if (next < v.size() && writes_[v[next] - 1].epoch < hi) {
        hi = writes_[v[next] - 1].epoch;
        hi_why = "block " + std::to_string(b) + " lacks write " + std::to_string(v[next]);
      }
    }
    if (lo > hi)
      Violation("no epoch E fits: " + lo_why + " of epoch " + std::to_string(lo) + ", " + hi_why + " of epoch " +
                std::to_string(hi));
  }

  std::mutex mu_;
  std::vector<Write> writes_;
  std::map<uint64_t, std::vector<uint64_t>> versions_;  // block -> write ids, in order
  uint64_t image_[kBlocks] = {};                        // block -> write id on the backing device
  std::set<uint64_t> completed_;
  std::set<std::pair<uint64_t, uint64_t>> unflushed_;  // (id, epoch) not yet covered by a flush
  std::vector<uint64_t> acked_ms_;                     // id - 1 -> unix ms of its ack (0: not yet)
  std::map<uint64_t, uint64_t> zero_;                  // block -> id of its last discard / write-zeroes
  uint64_t violations_ = 0, checks_ = 0, as_of_checks_ = 0;
  std::string first_;
};

// The backing device's data region, recording what reaches it.
class Recorder final : public BlockDevice {
 public:
  Recorder(BlockDevice* lower, History* h)
      : BlockDevice("recorder", lower->size(), lower->logical_block_size(), false), lower_(lower), h_(h) {}

  // Called as each backing write is submitted (tests look at the moment).
  std::function<void(uint64_t offset)> on_write;

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override {
    if (req.op == IoOp::kWrite) {
      if (on_write) on_write(req.offset);
      h_->Submitted(req.offset, static_cast<const uint8_t*>(req.buf), req.len);
      lower_->Submit(req, [this, req, done = std::move(done)](Status st) mutable {
        if (st.ok()) h_->Completed(req.offset, static_cast<const uint8_t*>(req.buf), req.len, req.flags & kIoFua);
        done(std::move(st));
      });
      return;
    }
    if (req.op == IoOp::kFlush) {
      auto covered = std::make_shared<std::set<uint64_t>>(h_->FlushSubmitted());
      lower_->Submit(req, [this, covered, done = std::move(done)](Status st) mutable {
        if (st.ok()) h_->FlushCompleted(*covered);
        done(std::move(st));
      });
      return;
    }
    if (req.op == IoOp::kDiscard || req.op == IoOp::kWriteZeroes) {
      h_->ZeroSubmitted(req.offset, req.len);
      lower_->Submit(req, [this, req, done = std::move(done)](Status st) mutable {
        if (st.ok()) h_->ZeroCompleted(req.offset, req.len);
        done(std::move(st));
      });
      return;
    }
    lower_->Submit(req, std::move(done));
  }

 private:
  BlockDevice* lower_;
  History* h_;
};

// The whole backing device under the data region: sees each backing
// superblock write before it is submitted (BackingSuper's), and checks the
// time it promises (rule 16).
class SuperWatch final : public BlockDevice {
 public:
  SuperWatch(std::unique_ptr<BlockDevice> lower, History* h)
      : BlockDevice("superwatch", lower->size(), lower->logical_block_size(), false), lower_(std::move(lower)), h_(h) {}
  uint64_t records() const { return records_.load(); }
  uint64_t last_as_of() const { return last_.load(); }
  // consistent_as_of of the last backing superblock write that completed.
  uint64_t media_as_of() const { return media_.load(); }

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override {
    if (req.op == IoOp::kWrite && req.offset <= BackingSuperblock::kSbSector * 512 &&
        req.offset + req.len >= BackingSuperblock::kSbSector * 512 + 4096) {
      AlignedBuffer block(4096);
      std::memcpy(block.data(), static_cast<const uint8_t*>(req.buf) + BackingSuperblock::kSbSector * 512 - req.offset,
                  4096);
      auto sb = DecodeBackingSuperblock(ConstSuperblockBlock(block.data(), kSuperblockSize));
      if (sb.ok() && sb->consistent_as_of != 0) {
        h_->CheckAsOf(sb->consistent_as_of);
        records_++;
        last_ = sb->consistent_as_of;
      }
      if (sb.ok()) {
        lower_->Submit(req, [this, t = sb->consistent_as_of, done = std::move(done)](Status st) mutable {
          if (st.ok()) media_ = t;
          done(std::move(st));
        });
        return;
      }
    }
    lower_->Submit(req, std::move(done));
  }

 private:
  std::unique_ptr<BlockDevice> lower_;
  History* h_;
  std::atomic<uint64_t> records_{0}, last_{0}, media_{0};
};

struct EpochRig {
  std::unique_ptr<Reactor> reactor;
  std::unique_ptr<FaultDevice> cache;
  std::unique_ptr<BlockDevice> raw_backing;  // a SuperWatch over the memory
  SuperWatch* watch = nullptr;
  std::unique_ptr<OffsetDevice> data;
  std::unique_ptr<Recorder> backing;
  std::unique_ptr<BackingSuper> super;
  std::unique_ptr<CacheSet> set;
  std::unique_ptr<CachedDevice> dev;
  History history;
  WritebackOrder order;
  // Knobs a test sets before the device starts: its writeback thread's
  // first rate update runs at once and would overwrite a rate set later.
  std::function<void(CacheKnobs&)> tune;

  explicit EpochRig(WritebackOrder o, std::function<void(CacheKnobs&)> t = {}) : order(o), tune(std::move(t)) {
    reactor = std::move(Reactor::Create().value());
    reactor->Bind();
    cache = std::make_unique<FaultDevice>("fault:cache", std::move(MemDevice::Create("mem:c", 32 << 20).value()),
                                          FaultConfig{});
    auto w = std::make_unique<SuperWatch>(std::move(MemDevice::Create("mem:b", 16 << 20).value()), &history);
    watch = w.get();
    raw_backing = std::move(w);
    CacheFormatOptions co;
    co.bucket_size = 64 << 10;
    auto csb = NewCacheSuperblock(co, cache->size(), cache->logical_block_size());
    REQUIRE(csb.ok());
    REQUIRE(WriteCacheSuperblock(*cache, *csb).ok());
    BackingFormatOptions bo;
    auto bsb = NewBackingSuperblock(bo, raw_backing->size(), raw_backing->logical_block_size());
    REQUIRE(bsb.ok());
    REQUIRE(WriteBackingSuperblock(*raw_backing, *bsb).ok());
    data = std::make_unique<OffsetDevice>(raw_backing.get(), bsb->data_offset_bytes());
    backing = std::make_unique<Recorder>(data.get(), &history);
    Start();
  }
  ~EpochRig() { Drop(); }

  void Start() {
    auto csb = ReadCacheSuperblock(*cache);
    REQUIRE(csb.ok());
    auto s = CacheSet::Open(cache.get(), *csb, CacheSet::Options{});
    REQUIRE(s.ok());
    set = std::move(s).value();
    auto bsb = ReadBackingSuperblock(*raw_backing);
    REQUIRE(bsb.ok());
    super = std::make_unique<BackingSuper>(raw_backing.get(), *bsb);
    bool attached = bsb->set_uuid == set->set_uuid() && bsb->state != BackingState::kNone;
    if (!attached) REQUIRE(super->Attach(set->set_uuid()).ok());
    CacheKnobs& k = set->knobs();
    k.cache_mode = CacheMode::kWriteback;
    k.writeback_order = order;
    k.sequential_cutoff = 0;
    k.congested_read_threshold_us = 0;
    k.congested_write_threshold_us = 0;
    // Writeback runs beside the client all the time, as fast as it can.
    k.writeback_percent = 0;
    k.writeback_rate_minimum = uint64_t{1} << 32;
    k.writeback_rate = uint64_t{1} << 32;
    k.writeback_delay = 0;
    if (tune) tune(k);
    dev = std::make_unique<CachedDevice>("backing", set.get(), set->DeviceNumber(bsb->uuid, attached),
                                         backing.get(), super.get());
    REQUIRE(dev->can_writeback());
    REQUIRE(set->Checkpoint().ok());
  }
  void Drop() {
    dev.reset();
    set.reset();  // no Shutdown: a crash
    super.reset();
  }
  // kill -9: nothing more reaches the cache device; it keeps what it got.
  void Crash() {
    FaultConfig live = cache->config(), dead = live;
    dead.eio_probability = 1;
    dead.eio_reads = false;
    cache->SetConfig(dead);
    Drop();
    cache->SetConfig(live);
    Start();
  }

  uint64_t epoch = 0;  // the client's count of completed barriers
  void Write(uint64_t block, bool fua) {
    uint64_t id = history.Issue(block, epoch);
    AlignedBuffer b(kBlock);
    std::memset(b.data(), static_cast<int>(id & 0xff), kBlock);
    StoreLE64(b.data(), id);
    Status st = SyncWrite(*dev, block * kSpacing, kBlock, b.data(), fua ? uint32_t{kIoFua} : 0u);
    INFO(st.ToString());
    REQUIRE(st.ok());
    history.Acked(id, UnixMillis());
    if (fua) epoch++;  // a FUA write is the last of its epoch
  }
  void Flush() {
    REQUIRE(SyncFlush(*dev).ok());
    epoch++;
  }
  // A discard or write-zeroes of one block: it goes to the backing device
  // directly, behind the older epochs (rule 14).
  // In flush order with older epochs dirty a discard is skipped (the
  // block keeps its data) and a write-zeroes taken as a write of zeros.
  void Zero(uint64_t block, IoOp op) {
    uint64_t id = history.IssueZero(block, epoch);
    const uint64_t skipped = dev->discards_skipped();
    Status st = SyncIo(*dev, {op, 0, block * kSpacing, kBlock, nullptr});
    INFO(st.ToString());
    REQUIRE(st.ok());
    if (dev->discards_skipped() != skipped) {
      history.Unissue(block, id);
      return;
    }
    history.Acked(id, UnixMillis());
  }
  // Random ops; a hot set of blocks is overwritten across many epochs.
  // Without `fua` the epochs end at FLUSHes only.
  void Run(std::mt19937_64& rng, int ops, bool fua = true) {
    for (int i = 0; i < ops; i++) {
      uint64_t r = rng() % 100;
      if (r < 8) {
        Flush();
      } else {
        uint64_t block = rng() % 2 ? rng() % 8 : rng() % kBlocks;
        Write(block, fua && r < 12);
      }
      if (rng() % 64 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let writeback catch up
    }
  }
  void CheckFinal() {
    REQUIRE(dev->writeback()->Drain([](const std::string&) {}).ok());
    CHECK(dev->dirty_bytes() == 0);
    for (uint64_t b = 0; b < kBlocks; b++) {
      AlignedBuffer buf(kBlock);
      REQUIRE(SyncRead(*data, b * kSpacing, kBlock, buf.data()).ok());
      INFO("block " << b);
      const uint64_t latest = history.Latest(b);
      CHECK(LoadLE64(buf.data()) == (history.IsZero(latest) ? 0 : latest));
    }
  }
};

}  // namespace

TEST_CASE("flush order: the backing device always holds a state a power cut could have left") {
  for (uint64_t seed : {1, 2, 3}) {
    INFO("seed " << seed);
    EpochRig rig(WritebackOrder::kFlush);
    std::mt19937_64 rng(seed);
    rig.Run(rng, 1500);
    rig.CheckFinal();
    INFO(rig.history.first_violation());
    UNSCOPED_INFO("seed " << seed << ": " << rig.history.checks() << " backing writes checked");
    CHECK(rig.history.checks() > 20);  // backing writes were checked (beside the client and in the drain)
    CHECK(rig.history.violations() == 0);
  }
}

TEST_CASE("flush order: epochs and kept versions survive a crash of the daemon") {
  EpochRig rig(WritebackOrder::kFlush);
  std::mt19937_64 rng(7);
  for (int round = 0; round < 4; round++) {
    rig.Run(rng, 400);
    rig.Crash();  // the index, its epochs and kept versions replayed from the journal
  }
  rig.Run(rng, 200);
  REQUIRE(rig.set->Checkpoint().ok());
  rig.Crash();  // ... and from a checkpoint's epoch section
  rig.CheckFinal();
  INFO(rig.history.first_violation());
  CHECK(rig.history.violations() == 0);
}

TEST_CASE("flush order: a stale kept version does not stop writeback at its epoch") {
  // After a crash a kept version can point into a bucket reused since: the
  // bucket's new gen is journaled at once (CacheSet::PersistGens) while the
  // unkeep that freed it was still in a shard's unwritten ops. Made here
  // directly: the bucket gets a new gen as a start's replay of a gens
  // record gives it (BucketAllocator::ApplyGens). Broken on purpose to see
  // this fail: Writeback::TakePiece without the drop of a stale pointer —
  // epoch 1 then stays the oldest for good, and nothing is written back.
  EpochRig rig(WritebackOrder::kFlush);
  CacheKnobs& k = rig.set->knobs();
  k.writeback_running = false;
  rig.Write(3, false);  // epoch 1
  rig.Flush();
  rig.Write(3, false);  // epoch 2 over it: the epoch 1 piece is kept
  rig.Write(5, false);
  const uint32_t d = rig.dev->dev_index();
  auto kept = rig.set->index().KeptVersions(d, 1, 0, UINT64_MAX);
  REQUIRE(kept.size() == 1);
  BucketAllocator& buckets = rig.set->buckets();
  uint32_t b = buckets.BucketOf(kept[0].cache_offset);
  buckets.ApplyGens({{b, static_cast<uint8_t>(kept[0].gen + 1)}});
  REQUIRE(!buckets.Valid(kept[0].cache_offset, kept[0].gen));
  k.writeback_running = true;
  rig.dev->writeback()->Kick();
  for (int i = 0; i < 500 && rig.dev->dirty_bytes() != 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(rig.set->index().KeptVersions(d, 1, 0, UINT64_MAX).empty());
  CHECK(rig.dev->dirty_bytes() == 0);
}

// Rule 14 (cache/ordered_gate.h): with the sync cutoff at 0 the cache
// takes no write, so each goes to the backing device directly — after
// writeback has written every older epoch, and a FUA one after a backing
// flush covers its epoch's earlier writes. Broken on purpose to see this
// fail: OrderedGate::MayGo always true (the writes pass older epochs still
// in the cache), or RouteWrite's flush before a FUA write-through removed.
TEST_CASE("flush order: writes the cache turns away wait for older epochs (rule 14)") {
  for (uint64_t seed : {11, 12}) {
    INFO("seed " << seed);
    EpochRig rig(WritebackOrder::kFlush);
    std::mt19937_64 rng(seed);
    CacheKnobs& k = rig.set->knobs();
    k.writeback_order_suspend = false;  // strict: the wait itself (rule 17 suspends instead)
    rig.Run(rng, 300);  // absorbed: dirty epochs pile up
    k.cutoff_writeback_sync = 0;
    k.cutoff_writeback = 0;
    rig.Run(rng, 300);  // turned away, each after the older epochs
    CHECK(rig.dev->cutoff_writethroughs() > 0);
    CHECK(rig.dev->ordered_waits() > 0);
    k.cutoff_writeback_sync = 70;
    k.cutoff_writeback = 40;
    rig.Run(rng, 300);  // absorbed again, after the write-throughs
    rig.CheckFinal();
    INFO(rig.history.first_violation());
    CHECK(rig.history.violations() == 0);
  }
}

// With writeback stopped, 1200 epochs of one 4 KiB version each; then
// writeback passes slowed down (a 1 ms cache device) to see where a wait
// ends, and both cutoffs set below what is in use, so the next write is
// turned away for space. Returns the dirty epochs.
namespace {
uint64_t FillToTheCutoff(EpochRig& rig, std::mt19937_64& rng) {
  CacheKnobs& k = rig.set->knobs();
  k.writeback_running = false;
  for (int i = 0; i < 1200; i++) {
    rig.Write(rng() % kBlocks, false);
    rig.Flush();
  }
  const uint64_t backlog = rig.dev->dirty_epochs();
  const unsigned in_use = rig.set->in_use_percent();
  INFO("backlog " << backlog << " epochs, " << in_use << "% in use");
  REQUIRE(backlog >= 1000);
  REQUIRE(in_use >= 8);
  FaultConfig slow;
  slow.latency_us = 1000;
  rig.cache->SetConfig(slow);
  k.cutoff_writeback_sync = in_use - 4;
  k.cutoff_writeback = in_use - 4;
  return backlog;
}
}  // namespace

// Rule 14 and space: a write the cache turns away for space alone (past
// cutoff_writeback_sync) waits at the gate only until writeback has
// cleaned enough buckets, then goes into the cache — not until every older
// epoch is on the backing device (with a backlog of thousands of epochs
// over a spindle that was minutes: bench/run ordered, dbench at 128
// clients). Broken on purpose to see this fail: RouteWrite entering the
// gate without room_ok (the write returns only once the backlog is gone).
TEST_CASE("flush order: a write turned away for space waits for room and not for the whole backlog") {
  EpochRig rig(WritebackOrder::kFlush);
  std::mt19937_64 rng(41);
  CacheKnobs& k = rig.set->knobs();
  k.writeback_order_suspend = false;  // strict (rule 17's suspension: the next test)
  const uint64_t backlog = FillToTheCutoff(rig, rng);
  rig.Write(7, false);  // turned away: waits (writeback runs for it) until there is room
  const uint64_t left = rig.dev->dirty_epochs();
  UNSCOPED_INFO(left << " of " << backlog << " epochs still dirty when the write went into the cache");
  CHECK(rig.dev->ordered_waits() == 1);
  CHECK(rig.dev->ordered_room_retries() == 1);
  CHECK(left >= backlog / 4);
  rig.cache->SetConfig(FaultConfig{});
  k.cutoff_writeback_sync = 70;
  k.cutoff_writeback = 40;
  k.writeback_running = true;
  rig.Run(rng, 300);
  rig.CheckFinal();
  INFO(rig.history.first_violation());
  CHECK(rig.history.violations() == 0);
}

// Rule 17 (cache/ordered_gate.h): with writeback_order_suspend (the
// default) a write the full cache turns away, and that finds no room within
// a second, does not wait for the backlog: the writeback thread first clears
// the backing superblock's consistent_as_of, durably, then suspends the
// order and lets the write go, and resumes it once the cache has room.
// Broken on purpose to see this fail: Suspend() before SuspendOrder() (the
// media still promises a time when the write reaches the backing device),
// or the suspension never wanted (the write waits for the whole backlog).
TEST_CASE("flush order: a cache full of dirty epochs suspends the order, promise first, and resumes it with room") {
  EpochRig rig(WritebackOrder::kFlush);
  std::mt19937_64 rng(43);
  CacheKnobs& k = rig.set->knobs();
  FillToTheCutoff(rig, rng);
  // No room until nearly all is written back, each pass slower than its
  // epoch is worth: the backlog would take many seconds.
  k.cutoff_writeback_sync = 0;
  k.cutoff_writeback = 0;
  FaultConfig slow;
  slow.latency_us = 5000;
  rig.cache->SetConfig(slow);
  auto media_as_of = [&] { return rig.watch->media_as_of(); };
  REQUIRE(media_as_of() != 0);  // flush order, dirty: a time is promised
  // The backing superblock as the suspended write reaches the backing device.
  auto as_of_at_write = std::make_shared<std::atomic<uint64_t>>(1);
  rig.backing->on_write = [as_of_at_write, w = rig.watch](uint64_t offset) {
    uint64_t unseen = 1;
    if (offset == 7 * kSpacing) as_of_at_write->compare_exchange_strong(unseen, w->media_as_of());
  };
  rig.Write(7, false);
  // The backlog: over 1000 epochs, each pass at least one 5 ms cache read;
  // the suspension: a second's wait for room, then a superblock write.
  UNSCOPED_INFO("the write waited " << rig.dev->ordered_wait_us() << " us");
  CHECK(rig.dev->ordered_waits() == 1);
  CHECK(rig.dev->ordered_wait_us() >= OrderedGate::kSuspendAfterNs / 1000);
  CHECK(rig.dev->ordered_wait_us() < 4'000'000);
  CHECK(rig.dev->order_suspensions() == 1);
  CHECK(rig.dev->ordered_room_retries() == 0);
  CHECK(*as_of_at_write == 0);  // the promise was gone before the write got there
  CHECK(media_as_of() == 0);
  CHECK(rig.dev->order_suspended());  // no room below cutoff_writeback 0
  // Suspended: the writes the cache turns away go at once.
  for (int i = 0; i < 20; i++) {
    rig.Write(rng() % kBlocks, false);
    rig.Flush();
  }
  CHECK(rig.dev->ordered_waits() == 1);
  // Written back to clean while suspended, then dirty again: the backing
  // superblock's dirty mark promises no time either (the writes after it
  // go out of order until the order resumes). Fails with MarkDirty
  // ignoring the suspension.
  REQUIRE(rig.dev->writeback()->Drain([](const std::string&) {}).ok());
  CHECK(rig.dev->order_suspended());
  k.cutoff_writeback_sync = 70;  // a FUA write is taken dirty again; cutoff_writeback 0 keeps it suspended
  rig.Write(3, true);
  for (int i = 0; i < 200 && rig.super->state() != BackingState::kDirty; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(rig.super->state() == BackingState::kDirty);
  CHECK(media_as_of() == 0);
  // Room again: resumed, and no time is promised while the epochs of the
  // suspension are dirty.
  rig.cache->SetConfig(FaultConfig{});
  k.cutoff_writeback_sync = 70;
  k.cutoff_writeback = 40;
  for (int i = 0; i < 500 && rig.dev->order_suspended(); i++) {
    rig.dev->writeback()->Kick();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(!rig.dev->order_suspended());
  CHECK(media_as_of() == 0);
  k.writeback_running = true;
  rig.CheckFinal();
}

// The dirty epochs' state (epoch x stripe counts, kept versions) goes into
// every checkpoint's bucket table, inside a journal half: past half of that
// (ExtentIndex::epoch_state_full) the cache takes no dirty write, which in
// flush order waits for writeback to retire epochs and then goes into the
// cache. Here a 512 KiB journal (budget 128 KiB) and 5000 epochs of one
// 4 KiB write each over a hot set, so most keep a version (~65 bytes of
// state each). Broken on purpose to see this fail: no budget
// (CacheSet::Open's SetEpochStateBudget removed) — the checkpoint no longer
// fits ("bucket table ... does not fit half of the journal area") and
// writes fail with it (bench/run ordered: fio got ENOSPC after 10 min).
TEST_CASE("flush order: the epochs' state stays within its checkpoint budget and writes wait instead") {
  EpochRig rig(WritebackOrder::kFlush);
  std::mt19937_64 rng(51);
  CacheKnobs& k = rig.set->knobs();
  k.writeback_order_suspend = false;  // strict: the writes wait (rule 17 would suspend the order)
  k.writeback_running = false;
  uint64_t max_state = 0;
  for (int i = 0; i < 5000; i++) {
    rig.Write(rng() % kBlocks, false);  // REQUIREs success
    rig.Flush();
    max_state = std::max(max_state, rig.set->index().epoch_state_bytes());
  }
  UNSCOPED_INFO("epoch state at most " << max_state << " bytes; " << rig.dev->ordered_waits() << " waits, "
                                       << rig.dev->ordered_room_retries() << " into the cache after all");
  CHECK(rig.dev->ordered_room_retries() > 0);  // the budget was reached, and writes went on in the cache
  CHECK(max_state <= 160 * 1024);              // the budget (128 KiB) and what one commit's writes add
  CHECK(rig.set->Checkpoint().ok());
  k.writeback_running = true;
  rig.CheckFinal();
  INFO(rig.history.first_violation());
  CHECK(rig.history.violations() == 0);
}

// Rule 14, the other road: writearound (and none) after a switch from
// writeback send every write to the backing device while the dirty epochs
// from before the switch are still being written back. Its epochs end at
// FLUSHes here (broken on purpose, MayGo always true: 309 violations):
// once no dirty data is left, writearound's writes reach
// the backing device as they would without a cache, where a FUA write
// does not order the plain writes before it (RouteWrite flushes before a
// FUA write-through only in writeback mode or while dirty data remains).
TEST_CASE("flush order: a switch to writearound keeps the writes behind the older epochs (rule 14)") {
  EpochRig rig(WritebackOrder::kFlush);
  std::mt19937_64 rng(21);
  CacheKnobs& k = rig.set->knobs();
  rig.Run(rng, 300);
  k.cache_mode = CacheMode::kWritearound;
  rig.Run(rng, 300, false);
  CHECK(rig.dev->ordered_waits() > 0);
  k.cache_mode = CacheMode::kWriteback;
  rig.Run(rng, 300);
  rig.CheckFinal();
  INFO(rig.history.first_violation());
  CHECK(rig.history.violations() == 0);
}

TEST_CASE("lba order breaks the rule the flush order keeps (the check can fail)") {
  uint64_t violations = 0;
  for (uint64_t seed : {1, 2, 3}) {
    EpochRig rig(WritebackOrder::kLba);
    std::mt19937_64 rng(seed);
    rig.Run(rng, 1500);
    rig.CheckFinal();  // the same data in the end
    violations += rig.history.violations();
  }
  CHECK(violations > 0);
}


// Rule 16 (cache/epoch_clock.h, Writeback::NoteProgress): every
// consistent_as_of the writeback thread writes into the backing superblock
// is a time before which every acknowledged write is on the backing device
// (checked by SuperWatch at each superblock write, before it is
// submitted). Writeback pauses now and then, so the promised time lags;
// the lag and the dirty epochs are visible meanwhile. Broken on purpose to
// see this fail: NoteProgress promising its clock reading whatever is dirty
// (`as_of = t_ms`) — violations at the first record after a pause.
TEST_CASE("flush order: consistent_as_of promises only what the backing device holds (rule 16)") {
  EpochRig rig(WritebackOrder::kFlush);
  std::mt19937_64 rng(31);
  CacheKnobs& k = rig.set->knobs();
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t max_lag_ms = 0, max_epochs = 0;
  for (int round = 0; std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(4500); round++) {
    k.writeback_running = round % 3 != 1;  // a pause every third round
    const auto r0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - r0 < std::chrono::milliseconds(600)) {
      rig.Run(rng, 20);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    max_lag_ms = std::max(max_lag_ms, rig.dev->writeback_lag_ms());
    max_epochs = std::max(max_epochs, rig.dev->dirty_epochs());
  }
  k.writeback_running = true;
  rig.CheckFinal();
  INFO(rig.history.first_violation());
  CHECK(rig.history.violations() == 0);
  UNSCOPED_INFO(rig.watch->records() << " records, " << rig.history.as_of_checks() << " checks, max lag "
                                     << max_lag_ms << " ms, max dirty epochs " << max_epochs);
  CHECK(rig.watch->records() >= 2);  // it moved forward more than once
  CHECK(max_lag_ms >= 400);          // a pause of 600 ms shows
  CHECK(max_epochs >= 2);
  // Clean at last: the superblock promises nothing (MarkClean cleared it).
  for (int i = 0; i < 300 && rig.super->state() == BackingState::kDirty; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(rig.super->Get().consistent_as_of == 0);
  CHECK(rig.dev->writeback_lag_ms() == 0);
  CHECK(rig.dev->dirty_epochs() == 0);
}

// Rule 16's other half: lba order may put a newer block on the device
// before an older one, so it promises no time — from the switch on, and
// after a switch back to flush until what was dirty then is written back.
TEST_CASE("lba order promises no consistent_as_of, nor does flush order until lba's dirty epochs are gone") {
  EpochRig rig(WritebackOrder::kFlush);
  CacheKnobs& k = rig.set->knobs();
  k.writeback_running = false;
  const uint64_t before = UnixMillis() / 1000;
  rig.Write(1, false);
  rig.Flush();
  BackingSuperblock sb = rig.super->Get();
  REQUIRE(sb.state == BackingState::kDirty);
  CHECK(sb.consistent_as_of >= before);  // MarkDirty: everything before it is there
  CHECK(sb.consistent_as_of == sb.dirty_since);
  // The switch, as ctl does it (control/attributes.cpp): superblock first.
  REQUIRE(rig.super->SetWritebackOrder(WritebackOrder::kLba).ok());
  k.writeback_order = WritebackOrder::kLba;
  CHECK(rig.super->Get().consistent_as_of == 0);
  REQUIRE(ReadBackingSuperblock(*rig.raw_backing).value().consistent_as_of == 0);  // durably
  const uint64_t records = rig.watch->records();  // MarkDirty's
  rig.Write(2, false);
  rig.Flush();
  // Back to flush with lba's epochs still dirty: no time while they are.
  REQUIRE(rig.super->SetWritebackOrder(WritebackOrder::kFlush).ok());
  k.writeback_order = WritebackOrder::kFlush;
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // two NoteProgress rounds
  CHECK(rig.super->Get().consistent_as_of == 0);
  CHECK(rig.watch->records() == records);
  // Once written back, the device is clean (no promise needed), and the
  // next dirty write makes one again.
  k.writeback_running = true;
  REQUIRE(rig.dev->writeback()->Drain([](const std::string&) {}).ok());
  CHECK(rig.super->state() == BackingState::kClean);
  rig.Write(3, false);
  CHECK(rig.super->Get().consistent_as_of != 0);
}

// Rule 14 for discards and write-zeroes. While older epochs are dirty a
// backing discard or write-zeroes would wait for all of them, so the
// device skips the discard (its data stays) and takes the write-zeroes as
// a dirty write of zeros in its epoch; otherwise both go to the backing
// device, behind the older epochs (DiscardEngine, OrderedGate). The
// recorder sees a discarded block become a version of zeros, and zeros
// written back name the block's write-zeroes (one per block). Broken on
// purpose to see this fail: OrderedGate::MayGo always true (the old
// version of this test: 472 and 403 violations).
TEST_CASE("flush order: discards and write-zeroes never overtake older epochs (rule 14)") {
  for (uint64_t seed : {41, 42}) {
    INFO("seed " << seed);
    EpochRig rig(WritebackOrder::kFlush);
    std::mt19937_64 rng(seed);
    for (int round = 0; round < 30; round++) {
      rig.Run(rng, 30);  // dirty epochs pile up
      uint64_t block = rng() % kBlocks;
      while (rig.history.HasZero(block)) block = (block + 1) % kBlocks;
      rig.Zero(block, rng() % 2 ? IoOp::kDiscard : IoOp::kWriteZeroes);
      if (round % 10 == 9) {  // now and then with nothing older dirty: to the backing device
        REQUIRE(rig.dev->writeback()->Drain([](const std::string&) {}).ok());
        rig.Flush();
        uint64_t b2 = rng() % kBlocks;
        while (rig.history.HasZero(b2)) b2 = (b2 + 1) % kBlocks;
        rig.Zero(b2, rng() % 2 ? IoOp::kDiscard : IoOp::kWriteZeroes);
      }
    }
    CHECK(rig.dev->discards_skipped() > 0);
    CHECK(rig.dev->zeroes_cached() > 0);
    rig.CheckFinal();
    INFO(rig.history.first_violation());
    CHECK(rig.history.violations() == 0);
  }
}

// writeback_lag_target (Writeback::MeasureLag): with the rate controller
// content (dirty data far below writeback_percent, the rate at its
// minimum) and the device busy (never idle), dirty data would stay for
// good; past twice the target writeback runs at full speed until the
// oldest epoch is young again.
TEST_CASE("flush order: writeback_lag_target bounds the lag when the rate controller would not") {
  EpochRig rig(WritebackOrder::kFlush, [](CacheKnobs& k) {
    k.writeback_percent = 40;
    k.writeback_rate_update_seconds = 60;
    k.writeback_rate_minimum = 4096;
    k.writeback_rate = 4096;
    k.writeback_lag_target = 0;
    k.writeback_running = false;  // all 64 blocks dirty first (a slow build writes them slowly)
  });
  CacheKnobs& k = rig.set->knobs();
  for (uint64_t b = 0; b < 64; b++) rig.Write(b, false);
  rig.Flush();
  const uint64_t dirty = rig.dev->dirty_bytes();
  REQUIRE(dirty >= 64 * kBlock);
  k.writeback_running = true;
  AlignedBuffer buf(kBlock);
  auto busy_for = [&](int ms) {  // a read every 20 ms: never idle
    for (int i = 0; i < ms / 20; i++) {
      REQUIRE(SyncRead(*rig.dev, 0, kBlock, buf.data()).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  busy_for(2500);
  INFO("dirty " << rig.dev->dirty_bytes() << " of " << dirty << ", lag " << rig.dev->writeback_lag_ms() << " ms");
  CHECK(rig.dev->dirty_bytes() >= dirty / 2);  // no target: the controller's pace
  CHECK(rig.dev->writeback_lag_ms() >= 2000);
  k.writeback_lag_target = 1;
  for (int i = 0; i < 100 * static_cast<int>(test::kTimingScale) && rig.dev->dirty_bytes() > 0; i++) busy_for(100);
  CHECK(rig.dev->dirty_bytes() == 0);
  CHECK(rig.dev->writeback_lag_ms() == 0);
}

// The rate's pause after a backing write is bounded (bcache's bch_next_delay:
// 2.5 s): at writeback_rate_minimum (4 KiB/s) a 1 MiB write would otherwise
// put the next one 256 s away, and a rate raised meanwhile would not be
// heard until then.
TEST_CASE("writeback: a write at the minimum rate pauses the next one at most 2.5 s") {
  EpochRig rig(WritebackOrder::kLba, [](CacheKnobs& k) {
    k.writeback_percent = 40;  // far above the dirty data: the rate stays at its minimum
    k.writeback_rate_update_seconds = 1;
    k.writeback_rate_minimum = 4096;
    k.writeback_rate = 4096;
    k.writeback_running = false;
  });
  CacheKnobs& k = rig.set->knobs();
  // 2 MiB at the front (the rig's spaced blocks are not used): two 1 MiB
  // backing writes.
  AlignedBuffer data(64 << 10);
  std::memset(data.data(), 0x5a, data.size());
  for (uint64_t off = 0; off < (2 << 20); off += data.size())
    REQUIRE(SyncWrite(*rig.dev, off, data.size(), data.data(), 0).ok());
  REQUIRE(SyncFlush(*rig.dev).ok());
  REQUIRE(rig.dev->dirty_bytes() >= 2 << 20);
  k.writeback_running = true;
  AlignedBuffer buf(kBlock);
  auto busy_for = [&](int ms) {  // a read every 20 ms: never idle, so never full speed
    for (int i = 0; i < ms / 20; i++) {
      REQUIRE(SyncRead(*rig.dev, 0, kBlock, buf.data()).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  busy_for(1000);
  Writeback::RateDebug d = rig.dev->writeback()->rate_debug();
  INFO("next io in " << d.next_io_ms << " ms, dirty " << rig.dev->dirty_bytes());
  CHECK(rig.dev->dirty_bytes() > 0);  // the minimum rate: the second write waits
  CHECK(d.next_io_ms <= 2500);
  // A rate raised now is heard by the next write, within the bound.
  k.writeback_rate_minimum = uint64_t{1} << 30;
  for (int i = 0; i < 50 * static_cast<int>(test::kTimingScale) && rig.dev->dirty_bytes() > 0; i++) busy_for(100);
  CHECK(rig.dev->dirty_bytes() == 0);
}

}  // namespace ubcache
