// SPDX-License-Identifier: Apache-2.0
#include "cache/epoch_clock.h"

#include <time.h>

#include <algorithm>

namespace ubcache {

uint64_t UnixMillis() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1'000'000;
}

void EpochClock::Start(uint64_t newest, uint64_t floor_ms) {
  MutexLock l(&mu_);
  stamps_.clear();
  stamps_.emplace_back(0, floor_ms);
  stamped_through_.store(newest, std::memory_order_release);
}

void EpochClock::Stamp(uint64_t first, uint64_t last, uint64_t t_ms) {
  MutexLock l(&mu_);
  for (uint64_t e = first; e <= last; e++) {
    auto it = std::lower_bound(stamps_.begin(), stamps_.end(), std::make_pair(e, uint64_t{0}));
    if (it != stamps_.end() && it->first == e)
      it->second = std::min(it->second, t_ms);
    else
      stamps_.insert(it, {e, t_ms});  // at the end but when two writes race
  }
  if (stamps_.size() > kMaxStamps) {
    // Thin out the older half: every other stamp after the first goes.
    std::deque<std::pair<uint64_t, uint64_t>> kept;
    size_t half = stamps_.size() / 2;
    for (size_t i = 0; i < stamps_.size(); i++)
      if (i == 0 || i >= half || i % 2 == 0) kept.push_back(stamps_[i]);
    stamps_.swap(kept);
  }
  if (stamped_through_.load(std::memory_order_relaxed) < last)
    stamped_through_.store(last, std::memory_order_release);
}

uint64_t EpochClock::AsOf(uint64_t oldest) const {
  MutexLock l(&mu_);
  auto it = std::upper_bound(stamps_.begin(), stamps_.end(), std::make_pair(oldest, UINT64_MAX));
  return it == stamps_.begin() ? 0 : std::prev(it)->second;
}

uint64_t EpochClock::LagMs(std::optional<uint64_t> oldest, uint64_t now_ms) const {
  if (!oldest) return 0;
  const uint64_t began = AsOf(*oldest);
  return began && began < now_ms ? now_ms - began : 0;
}

void EpochClock::Forget(uint64_t oldest) {
  MutexLock l(&mu_);
  auto it = std::upper_bound(stamps_.begin(), stamps_.end(), std::make_pair(oldest, UINT64_MAX));
  if (it == stamps_.begin()) return;
  stamps_.erase(stamps_.begin(), std::prev(it));  // the newest stamp <= oldest stays
}

size_t EpochClock::stamps() const {
  MutexLock l(&mu_);
  return stamps_.size();
}

}  // namespace ubcache
