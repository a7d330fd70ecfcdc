// SPDX-License-Identifier: Apache-2.0
// Monotonic time in nanoseconds, the one clock for deadlines and latencies.
#pragma once

#include <cstdint>
#include <ctime>

namespace ubcache {

inline uint64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace ubcache
