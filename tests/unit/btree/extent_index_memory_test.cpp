// SPDX-License-Identifier: Apache-2.0
// The node cache bounds memory, not the index: a million extents in a
// file-backed store, with a 4 MiB btree_cache_size. Reports bytes per extent
// on disk and in memory.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "btree/extent_index.h"
#include "tests/unit/btree/index_test_support.h"
#include "util/thread_annotations.h"

using namespace ubcache;
using namespace ubcache::testing;

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define UB_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define UB_SANITIZED 1
#endif

namespace {

#ifdef UB_SANITIZED
// Sanitizer shadow memory swamps RSS, and instrumented code is slow: a
// smaller index, and no RSS bound.
constexpr uint64_t kExtents = 200000;
#else
constexpr uint64_t kExtents = 1000000;
#endif

// Nodes and journal in an unlinked temporary file, so they live in the page
// cache and not in this process's resident set.
class FileNodeStore final : public NodeStore {
 public:
  FileNodeStore(uint32_t node_size) : node_size_(node_size) {
    char nodes[] = "/tmp/ubcache-nodes-XXXXXX";
    char journal[] = "/tmp/ubcache-journal-XXXXXX";
    fd_ = mkstemp(nodes);
    jfd_ = mkstemp(journal);
    unlink(nodes);
    unlink(journal);
  }
  ~FileNodeStore() override {
    close(fd_);
    close(jfd_);
  }
  uint32_t node_size() const override { return node_size_; }
  Result<uint64_t> AllocNode() override {
    MutexLock l(&mu_);
    if (!free_.empty()) {
      uint64_t a = free_.back();
      free_.pop_back();
      return a;
    }
    uint64_t a = next_;
    next_ += node_size_;
    return a;
  }
  void FreeNode(uint64_t addr) override {
    MutexLock l(&mu_);
    free_.push_back(addr);
  }
  Status WriteNode(uint64_t addr, const uint8_t* data) override {
    if (pwrite(fd_, data, node_size_, addr) != (ssize_t)node_size_) {
      return Status::IoError("pwrite");
    }
    return Status::OK();
  }
  Status ReadNode(uint64_t addr, uint8_t* data) override {
    if (pread(fd_, data, node_size_, addr) != (ssize_t)node_size_) {
      return Status::IoError("pread");
    }
    return Status::OK();
  }
  Status AppendJournal(const uint8_t* data, size_t len) override {
    MutexLock l(&mu_);
    if (pwrite(jfd_, data, len, jlen_) != (ssize_t)len) return Status::IoError("pwrite");
    jlen_ += len;
    return Status::OK();
  }
  Status ReadJournal(std::vector<uint8_t>* all) override {
    MutexLock l(&mu_);
    all->resize(jlen_);
    if (jlen_ && pread(jfd_, all->data(), jlen_, 0) != (ssize_t)jlen_) {
      return Status::IoError("pread");
    }
    return Status::OK();
  }
  Status TrimJournal() override {
    MutexLock l(&mu_);
    jlen_ = 0;
    return Status::OK();
  }
  Status DiscardJournalTail(size_t valid) override {
    MutexLock l(&mu_);
    jlen_ = valid;
    return Status::OK();
  }
  uint64_t live_bytes() {
    MutexLock l(&mu_);
    return next_ - free_.size() * node_size_;
  }

 private:
  const uint32_t node_size_;
  int fd_, jfd_;
  Mutex mu_;
  uint64_t next_ GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> free_ GUARDED_BY(mu_);
  uint64_t jlen_ GUARDED_BY(mu_) = 0;
};

uint64_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return uint64_t(resident) * sysconf(_SC_PAGESIZE);
}

}  // namespace

TEST_CASE("a million extents stay correct with resident memory bounded by btree_cache_size") {
  constexpr uint64_t kCache = 4 << 20;
  FileNodeStore store(64 * 1024);
  ExtentIndex::Options o;
  o.cache_bytes = kCache;
  auto idx = MustCreate(&store, o);
  uint64_t rss0 = ResidentBytes();
  uint64_t max_cached = 0, max_rss = 0;
  IndexRoot root;
  auto t0 = std::chrono::steady_clock::now();
  // Every other block, so no two extents touch: 1M extents over 8 GiB of two devices.
  for (uint64_t i = 0; i < kExtents; i++) {
    REQUIRE(idx->Insert(Ext(i & 1, (i >> 1) * 2, 1, i)).ok());
    if (i % 1000 == 999) {
      REQUIRE(idx->Commit().ok());
      max_cached = std::max(max_cached, idx->stats().cached_bytes);
    }
    if (i % 100000 == 99999) {
      root = idx->Checkpoint([&](const IndexRoot& r) { root = r; return Status::OK(); }).value();
      max_rss = std::max(max_rss, ResidentBytes());
    }
  }
  double insert_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto st = idx->stats();
  CHECK(st.extents == kExtents);

  // Random lookups across the whole index, from a cold cache after reopen.
  idx.reset();
  idx = MustOpen(&store, root, o);
  std::mt19937_64 rng(1);
  t0 = std::chrono::steady_clock::now();
  for (int n = 0; n < 20000; n++) {
    uint64_t i = rng() % kExtents;
    auto got = LookupAll(*idx, i & 1, (i >> 1) * 2, 2);
    REQUIRE(got.size() == 1);
    REQUIRE(got[0].cache_offset == i * K);
    max_cached = std::max(max_cached, idx->stats().cached_bytes);
  }
  double lookup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  max_rss = std::max(max_rss, ResidentBytes());
  auto st2 = idx->stats();

  uint64_t disk = uint64_t(st2.nodes) * 64 * 1024;
  uint64_t rss_growth = max_rss > rss0 ? max_rss - rss0 : 0;
  WARN(kExtents << " extents: " << st2.nodes << " nodes of 64 KiB = " << disk / (1 << 20) << " MiB on disk, "
       << double(disk) / kExtents << " B/extent on disk (26 B packed entry); "
       << "decoded in memory " << sizeof(Extent) << " B/extent; "
       << "max cached_bytes " << max_cached << " (budget " << kCache << "), "
       << "RSS growth " << rss_growth / 1024 << " KiB = " << double(rss_growth) / kExtents
       << " B/extent of the whole index; "
       << "insert " << insert_s << " s, 20000 cold random lookups " << lookup_s << " s ("
       << st2.node_reads << " node reads)");
  // The root of each shard may sit above its slice of the budget: one node
  // per shard of slack.
  CHECK(max_cached <= kCache + o.shards * (64 * 1024 / 26 * sizeof(Extent) + 4096));
#ifndef UB_SANITIZED
  // Everything resident would be at least 40 B/extent = 40 MB.
  CHECK(rss_growth < 24u << 20);
#endif
}
