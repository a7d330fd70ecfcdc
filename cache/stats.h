// SPDX-License-Identifier: Apache-2.0
// CacheStats: bcache's request statistics (stats.c), kept incrementally.
//
// The I/O path only bumps relaxed atomic counters. A read (Snapshot) folds
// what accumulated since the last fold into "total" and into three
// exponentially decayed sums whose time constants are five minutes, an hour
// and a day, as bcache's stats_five_minute / _hour / _day are, decaying them
// by the whole kTickSeconds ticks that passed. Counts that accumulate over a
// long unread stretch are folded as if they arrived in the last tick; a
// poller (control socket, metrics scraper) keeps the decay exact. Reading is
// O(1) and takes no lock the I/O path takes; the fold's mutex is taken only
// by readers.
//
// Thread safety: Count*() from any thread; Snapshot()/Clear() from any thread.
// Lock order: mu_ is a leaf, taken by readers only.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "util/thread_annotations.h"

namespace ubcache {

struct StatsGroup {
  double cache_hits = 0;
  double cache_misses = 0;
  double cache_bypass_hits = 0;
  double cache_bypass_misses = 0;
  double cache_miss_collisions = 0;
  double cache_readaheads = 0;
  double bypassed = 0;  // bytes
  // bcache's cache_hit_ratio: hits as a percentage of hits + misses.
  unsigned hit_ratio() const {
    double all = cache_hits + cache_misses;
    return all > 0 ? static_cast<unsigned>(cache_hits * 100 / all) : 0;
  }
};

enum class StatsWindow { kTotal = 0, kFiveMinute, kHour, kDay };
const char* StatsWindowName(StatsWindow w);  // "total", "five_minute", "hour", "day"

class CacheStats {
 public:
  static constexpr uint64_t kTickSeconds = 5;

  void CountHit(bool bypass) { Bump(bypass ? kBypassHits : kHits, 1); }
  void CountMiss(bool bypass) { Bump(bypass ? kBypassMisses : kMisses, 1); }
  void CountMissCollision() { Bump(kMissCollisions, 1); }
  void CountReadahead() { Bump(kReadaheads, 1); }
  void CountBypassed(uint64_t bytes) { Bump(kBypassed, bytes); }

  // The group for `w`, folding in what is pending if a tick is due.
  StatsGroup Snapshot(StatsWindow w, uint64_t now_ns) EXCLUDES(mu_);
  void Clear() EXCLUDES(mu_);

 private:
  enum Counter { kHits, kMisses, kBypassHits, kBypassMisses, kMissCollisions, kReadaheads, kBypassed, kCount };
  void Bump(Counter c, uint64_t n) { pending_[c].fetch_add(n, std::memory_order_relaxed); }
  void FoldLocked(uint64_t now_ns) REQUIRES(mu_);

  std::array<std::atomic<uint64_t>, kCount> pending_{};
  Mutex mu_;
  std::array<StatsGroup, 4> groups_ GUARDED_BY(mu_);
  uint64_t last_tick_ns_ GUARDED_BY(mu_) = 0;
};

}  // namespace ubcache
