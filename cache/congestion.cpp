// SPDX-License-Identifier: Apache-2.0
#include "cache/congestion.h"

#include <algorithm>

namespace ubcache {

void Congestion::Observe(uint64_t latency_us, uint32_t threshold_us, uint64_t now_us) {
  if (threshold_us == 0) return;
  int64_t s = score_.load(std::memory_order_relaxed);
  if (latency_us > threshold_us) {
    int64_t ms = static_cast<int64_t>(latency_us / 1024);
    ms = std::min(ms, kMax + s);  // never below -kMax
    last_us_.store(now_us, std::memory_order_relaxed);
    slow_ios_.fetch_add(1, std::memory_order_relaxed);
    score_.fetch_sub(ms, std::memory_order_relaxed);
  } else if (s < 0) {
    score_.fetch_add(1, std::memory_order_relaxed);
  }
}

uint64_t Congestion::CongestedCutoff(uint32_t read_threshold_us, uint32_t write_threshold_us,
                                     uint64_t now_us) const {
  if (read_threshold_us == 0 && write_threshold_us == 0) return 0;
  uint64_t last = last_us_.load(std::memory_order_relaxed);
  // Each ~ms since the last slow completion forgives one point.
  int64_t i = now_us >= last ? static_cast<int64_t>((now_us - last) / 1024) : 0;
  i += score_.load(std::memory_order_relaxed);
  if (i >= 0) return 0;
  i += kMax;  // 0 (worst) .. kMax-1 (barely congested)
  if (i <= 0) return 512;
  // bcache turns the remaining headroom into a cutoff in sectors with
  // fract_exp_two(i, 6): roughly 2^(i/64). Same curve, in bytes.
  uint64_t sectors = uint64_t{1} << std::min<int64_t>(i / 64, 20);
  sectors += sectors * static_cast<uint64_t>(i % 64) / 64;
  return sectors * 512;
}

}  // namespace ubcache
