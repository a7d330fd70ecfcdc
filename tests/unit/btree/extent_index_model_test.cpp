// SPDX-License-Identifier: Apache-2.0
// Model-based test: millions of random Insert/Invalidate/Lookup operations
// against a block-by-block oracle, with a node cache so small that nodes are
// evicted (and written back) on almost every operation, and with checkpoints,
// clean reopens and crashes (the index dropped without a checkpoint, the
// journal sometimes torn) at random points. After every reopen the index must
// equal the oracle as of the last Commit or Checkpoint.
//
// Default: 1,000,000 ops with 1 KiB nodes, fewer in the larger geometries.
// UBCACHE_MODEL_OPS=N overrides all three; the hidden test tagged [long]
// runs 1,000,000 ops in every geometry.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <random>

#include "btree/extent_index.h"
#include "btree/journal_format.h"
#include "btree/mem_node_store.h"
#include "tests/unit/btree/index_test_support.h"

using namespace ubcache;
using namespace ubcache::testing;

namespace {

struct ModelConfig {
  uint32_t node_size;
  unsigned shards;
  uint64_t stripe_bytes;
  uint64_t cache_bytes;
  uint32_t devs;
  uint64_t blocks;  // per device
  uint64_t max_insert_blocks;
};

struct Slot {
  bool present = false;
  uint64_t cache_blk = 0;
  uint8_t gen = 0;
  bool dirty = false;
  bool operator==(const Slot&) const = default;
};

class Model {
 public:
  Model(const ModelConfig& c, uint64_t seed)
      : c_(c), rng_(seed), store_(c.node_size), slots_(c.devs * c.blocks) {
    ExtentIndex::Options o;
    o.shards = c.shards;
    o.stripe_bytes = c.stripe_bytes;
    o.cache_bytes = c.cache_bytes;
    opts_ = o;
    idx_ = MustCreate(&store_, o);
    auto r = idx_->Checkpoint();
    REQUIRE(r.ok());
    root_ = *r;
  }

  void Run(uint64_t ops) {
    auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < ops; i++) {
      Step();
      if (i % 100000 == 99999) FullCompare();
    }
    REQUIRE(idx_->Commit().ok());
    Commit();
    Crash(false);
    FullCompare();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto st = idx_->stats();
    WARN("model: " << ops << " ops in " << s << " s (" << inserts_ << " inserts, "
                   << invalidates_ << " invalidates, " << lookups_ << " lookups, " << commits_
                   << " commits, " << checkpoints_ << " checkpoints, " << reopens_
                   << " clean reopens, " << crashes_ << " crashes, " << torn_
                   << " torn tails); final " << st.extents << " extents in " << st.nodes
                   << " nodes, node reads " << total_reads_ + st.node_reads << ", writes "
                   << total_writes_ + st.node_writes);
  }

 private:
  uint64_t Rand(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
  Slot& At(uint32_t dev, uint64_t b) { return slots_[dev * c_.blocks + b]; }

  void Set(uint32_t dev, uint64_t b, const Slot& s) {
    Slot& cur = At(dev, b);
    if (cur == s) return;
    undo_.push_back({dev * c_.blocks + b, cur});
    cur = s;
  }

  void Step() {
    uint64_t r = Rand(1000);
    uint32_t dev = static_cast<uint32_t>(Rand(c_.devs));
    if (r < 450) {  // insert
      uint64_t len = Rand(10) == 0 ? 1 + Rand(256) : 1 + Rand(c_.max_insert_blocks);
      uint64_t start = Rand(c_.blocks - len + 1);
      Extent e = Ext(dev, start, len, Rand(1 << 20), static_cast<uint8_t>(Rand(256)), Rand(2));
      REQUIRE(idx_->Insert(e).ok());
      for (uint64_t b = 0; b < len; b++) {
        Set(dev, start + b, Slot{true, e.cache_offset / K + b, e.gen, e.dirty});
      }
      inserts_++;
    } else if (r < 650) {  // invalidate
      uint64_t len = Rand(3000) == 0 ? c_.blocks : 1 + Rand(64);
      uint64_t start = Rand(c_.blocks - len + 1);
      REQUIRE(idx_->Invalidate(dev, start * K, len * K).ok());
      for (uint64_t b = 0; b < len; b++) Set(dev, start + b, Slot{});
      invalidates_++;
    } else if (r < 980) {  // lookup
      uint64_t len = 1 + Rand(300);
      uint64_t start = Rand(c_.blocks - len + 1);
      CheckRange(dev, start, len);
      lookups_++;
    } else if (r < 998) {
      REQUIRE(idx_->Commit().ok());
      Commit();
    } else {
      uint64_t x = Rand(100);
      if (x < 20) {
        Checkpoint();
      } else if (x < 25) {
        Checkpoint();
        Reopen();
      } else if (x < 30) {
        FailedCheckpointThenCrash();
      } else if (x < 45) {
        Crash(Rand(2) == 0);
      }
    }
  }

  // Assertions only on a mismatch: Catch's per-assertion cost would dominate.
  void CheckRange(uint32_t dev, uint64_t start, uint64_t len) {
    std::vector<Extent> out;
    REQUIRE(idx_->Lookup(dev, start * K, len * K, &out).ok());
    uint64_t b = start;
    auto fail = [&](const Extent* e, const char* what) {
      INFO("lookup dev " << dev << " [" << start << "+" << len << ") at block " << b << ": "
                         << what << (e ? " in " + Catch::StringMaker<Extent>::convert(*e) : ""));
      FAIL();
    };
    for (const Extent& e : out) {
      if (e.dev != dev || e.len == 0 || e.start % K || e.len % K) fail(&e, "malformed");
      if (e.start / K < b || e.end() / K > start + len) fail(&e, "unsorted or unclipped");
      for (; b < e.start / K; b++) {
        if (At(dev, b).present) fail(&e, "missing block");
      }
      for (uint64_t i = 0; i < e.len / K; i++, b++) {
        if (!(At(dev, b) == Slot{true, e.cache_offset / K + i, e.gen, e.dirty})) {
          fail(&e, "wrong mapping");
        }
      }
    }
    for (; b < start + len; b++) {
      if (At(dev, b).present) fail(nullptr, "missing block at the end");
    }
  }

  void FullCompare() {
    std::vector<Slot> seen(slots_.size());
    uint64_t n = 0;
    bool overlap = false;
    REQUIRE(idx_->ForEach([&](const Extent& e) {
      n++;
      for (uint64_t i = 0; i < e.len / K; i++) {
        Slot& s = seen[e.dev * c_.blocks + e.start / K + i];
        overlap |= s.present;
        s = Slot{true, e.cache_offset / K + i, e.gen, e.dirty};
      }
    }).ok());
    REQUIRE_FALSE(overlap);
    REQUIRE(n == idx_->stats().extents);
    for (size_t i = 0; i < slots_.size(); i++) {
      if (!(seen[i] == slots_[i])) {
        INFO("dev " << i / c_.blocks << " block " << i % c_.blocks << ": index has "
                    << seen[i].present << "@" << seen[i].cache_blk << ", oracle "
                    << slots_[i].present << "@" << slots_[i].cache_blk);
        FAIL();
      }
    }
  }

  void Commit() {
    last_commit_undo_ = std::move(undo_);
    undo_.clear();
    commits_++;
  }

  void Checkpoint() {
    auto r = idx_->Checkpoint([&](const IndexRoot& root) {
      root_ = root;  // the superblock write
      return Status::OK();
    });
    REQUIRE(r.ok());
    Commit();
    last_commit_undo_.clear();  // a checkpoint cannot be torn
    checkpoints_++;
  }

  void Drop() {
    auto st = idx_->stats();
    total_reads_ += st.node_reads;
    total_writes_ += st.node_writes;
    idx_.reset();
  }

  void Reopen() {
    Drop();
    idx_ = MustOpen(&store_, root_, opts_);
    reopens_++;
    FullCompare();
  }

  void RollBack(std::vector<std::pair<size_t, Slot>>* undo) {
    for (auto it = undo->rbegin(); it != undo->rend(); ++it) slots_[it->first] = it->second;
    undo->clear();
  }

  void Crash(bool torn) {
    Drop();
    RollBack(&undo_);  // uncommitted ops are lost
    if (torn) {
      if (Rand(2) == 0 && !last_commit_undo_.empty() && store_.journal_size() > 0) {
        // The last commit's append was torn: cut into its entry (its header is
        // at least 32 bytes, so cutting 1..32 bytes stays inside it), and the
        // state is the commit before.
        store_.TruncateJournal(store_.journal_size() - 1 - Rand(kJournalHeaderSize));
        RollBack(&last_commit_undo_);
      } else {
        // A commit that never finished: part of a plausible next entry, or
        // a whole one with a flipped byte, or noise.
        std::vector<uint8_t> payload;
        AppendInsertOp(&payload, Ext(0, 0, 1, 1));
        auto entry = EncodeJournalEntry(1u << 30, 1, payload);
        uint64_t how = Rand(3);
        if (how == 0) entry.resize(Rand(entry.size()));
        if (how == 1) entry[Rand(entry.size())] ^= 0x20;
        if (how == 2) for (auto& b : entry) b = static_cast<uint8_t>(Rand(256));
        store_.AppendJournalGarbage(entry);
      }
      torn_++;
    }
    last_commit_undo_.clear();
    idx_ = MustOpen(&store_, root_, opts_);
    crashes_++;
    FullCompare();
  }

  void FailedCheckpointThenCrash() {
    // Nodes get written, but the superblock write fails: the old root stays
    // the durable one and the journal must still hold every commit.
    auto r = idx_->Checkpoint([](const IndexRoot&) { return Status::IoError("injected"); });
    REQUIRE_FALSE(r.ok());
    Crash(false);
  }

  ModelConfig c_;
  std::mt19937_64 rng_;
  MemNodeStore store_;
  ExtentIndex::Options opts_;
  std::unique_ptr<ExtentIndex> idx_;
  IndexRoot root_;
  std::vector<Slot> slots_;
  std::vector<std::pair<size_t, Slot>> undo_, last_commit_undo_;
  uint64_t inserts_ = 0, invalidates_ = 0, lookups_ = 0, commits_ = 0, checkpoints_ = 0;
  uint64_t reopens_ = 0, crashes_ = 0, torn_ = 0, total_reads_ = 0, total_writes_ = 0;
};

uint64_t OpsFromEnv(uint64_t dflt) {
  const char* s = std::getenv("UBCACHE_MODEL_OPS");
  return s ? std::strtoull(s, nullptr, 10) : dflt;
}

// Small nodes, small stripes: deep trees, constant splits and merges,
// extents cut at stripe edges all the time.
const ModelConfig kSmallNodes{1024, 4, 64 * 1024, 16 * 1024, 3, 8192, 24};
// Production geometry (64 KiB nodes, 16 shards, 1 MiB stripes), a cache of
// about three decoded leaves.
const ModelConfig kProductionNodes{64 * 1024, 16, 1 << 20, 512 * 1024, 2, 262144, 2};
// In between: 4 KiB nodes (155 extents a leaf), 8 shards, 256 KiB stripes.
const ModelConfig kMediumNodes{4096, 8, 256 * 1024, 64 * 1024, 4, 32768, 24};

}  // namespace

TEST_CASE("index equals a block map oracle through random ops, evictions, checkpoints and crashes (small nodes)") {
  Model(kSmallNodes, 1).Run(OpsFromEnv(1000000));
}

TEST_CASE("index equals a block map oracle through random ops, evictions, checkpoints and crashes (64 KiB nodes)") {
  Model(kProductionNodes, 2).Run(OpsFromEnv(150000));
}

TEST_CASE("index equals a block map oracle through random ops, evictions, checkpoints and crashes (4 KiB nodes)") {
  Model(kMediumNodes, 5).Run(OpsFromEnv(300000));
}

TEST_CASE("one million random ops against the oracle in every geometry", "[.][long]") {
  Model(kSmallNodes, 3).Run(1000000);
  Model(kMediumNodes, 6).Run(1000000);
  Model(kProductionNodes, 4).Run(1000000);
}
