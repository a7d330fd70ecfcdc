// SPDX-License-Identifier: Apache-2.0
// Congestion: bcache's latency-driven congestion score (request.c
// bch_get_congested, io.c bch_bbio_count_io_errors). Cache-device
// completions slower than the threshold push the score down by their
// latency in ~ms; faster ones bring it back up one step at a time; time
// without slow completions forgives it too. While the score is negative,
// EffectiveCutoff() returns a cutoff that shrinks as congestion grows, so
// more I/O bypasses the cache and goes straight to the backing device.
//
// Thread safety: any thread; the state is two atomics.
#pragma once

#include <atomic>
#include <cstdint>

namespace ubcache {

class Congestion {
 public:
  static constexpr int64_t kMax = 1024;  // bcache's CONGESTED_MAX

  // A cache-device I/O took `latency_us`; `threshold_us` 0 disables.
  void Observe(uint64_t latency_us, uint32_t threshold_us, uint64_t now_us);
  // 0 when not congested; else a byte count: I/O in a run at least this long
  // bypasses the cache. Both thresholds 0 disable congestion entirely.
  uint64_t CongestedCutoff(uint32_t read_threshold_us, uint32_t write_threshold_us,
                           uint64_t now_us) const;
  int64_t score() const { return score_.load(std::memory_order_relaxed); }
  // Completions slower than their threshold since start: what drove the
  // score down (bench/run's tuning suite reports it beside the bypasses).
  uint64_t slow_ios() const { return slow_ios_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> score_{0};      // <= 0; more negative = more congested
  std::atomic<uint64_t> last_us_{0};   // last slow completion
  std::atomic<uint64_t> slow_ios_{0};
};

}  // namespace ubcache
