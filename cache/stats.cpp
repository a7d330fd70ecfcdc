// SPDX-License-Identifier: Apache-2.0
#include "cache/stats.h"

#include <cmath>

namespace ubcache {

const char* StatsWindowName(StatsWindow w) {
  switch (w) {
    case StatsWindow::kTotal: return "total";
    case StatsWindow::kFiveMinute: return "five_minute";
    case StatsWindow::kHour: return "hour";
    case StatsWindow::kDay: return "day";
  }
  return "?";
}

void CacheStats::FoldLocked(uint64_t now_ns) {
  if (last_tick_ns_ == 0) last_tick_ns_ = now_ns;
  // A reader reads the clock before taking mu_, so another may have folded
  // a tick past its reading: that is no time passed, not 2^64 ns.
  uint64_t elapsed_ns = now_ns > last_tick_ns_ ? now_ns - last_tick_ns_ : 0;
  uint64_t elapsed_ticks = elapsed_ns / (kTickSeconds * 1'000'000'000ull);
  std::array<double, kCount> add{};
  for (int c = 0; c < kCount; c++)
    add[c] = static_cast<double>(pending_[c].exchange(0, std::memory_order_relaxed));
  static const double kWindows[] = {0, 300, 3600, 86400};
  for (int g = 0; g < 4; g++) {
    // Decay what was there by the ticks that passed; then add what is new.
    double keep = g == 0 ? 1.0
                         : std::exp(-static_cast<double>(elapsed_ticks * kTickSeconds) / kWindows[g]);
    StatsGroup& s = groups_[g];
    s.cache_hits = s.cache_hits * keep + add[kHits];
    s.cache_misses = s.cache_misses * keep + add[kMisses];
    s.cache_bypass_hits = s.cache_bypass_hits * keep + add[kBypassHits];
    s.cache_bypass_misses = s.cache_bypass_misses * keep + add[kBypassMisses];
    s.cache_miss_collisions = s.cache_miss_collisions * keep + add[kMissCollisions];
    s.cache_readaheads = s.cache_readaheads * keep + add[kReadaheads];
    s.bypassed = s.bypassed * keep + add[kBypassed];
  }
  last_tick_ns_ += elapsed_ticks * kTickSeconds * 1'000'000'000ull;
}

StatsGroup CacheStats::Snapshot(StatsWindow w, uint64_t now_ns) {
  MutexLock l(&mu_);
  FoldLocked(now_ns);
  return groups_[static_cast<int>(w)];
}

void CacheStats::Clear() {
  MutexLock l(&mu_);
  for (auto& p : pending_) p.store(0, std::memory_order_relaxed);
  groups_ = {};
}

}  // namespace ubcache
