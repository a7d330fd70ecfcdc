// SPDX-License-Identifier: Apache-2.0
// SequentialDetector: bcache's stream detection (request.c,
// check_should_bypass). It remembers the last 128 streams, each a contiguous
// range; an I/O that starts where a stream ended, within 5 s, continues that
// stream and adds its length to the stream's run. Unlike bcache, an I/O that
// ends where a stream starts joins it too, and one that fills the gap
// between two streams joins them: a client with several connections (or
// several queues) delivers one stream's requests out of order, and exact
// continuation alone would see only fragments of it. A gap never joins. The
// caller compares the run with the (possibly congestion-shrunk) cutoff.
//
// Thread safety: none. CachedDevice keeps one per device, under a mutex.
#pragma once

#include <array>
#include <cstdint>

namespace ubcache {

class SequentialDetector {
 public:
  static constexpr unsigned kRecent = 128;
  static constexpr uint64_t kExpiryNanos = 5'000'000'000ull;

  // Records an I/O of `len` bytes at `offset` on device `dev` at time
  // `now_ns`; returns the length of the run it belongs to, itself included.
  uint64_t Observe(uint32_t dev, uint64_t offset, uint64_t len, uint64_t now_ns);

 private:
  struct Recent {
    uint32_t dev = 0;
    uint64_t first = UINT64_MAX;  // start of the stream's range
    uint64_t last = UINT64_MAX;   // end of the stream's range
    uint64_t run = 0;            // bytes in the stream so far
    uint64_t expires = 0;
    uint64_t lru = 0;            // higher = used more recently
  };
  std::array<Recent, kRecent> recent_{};
  // 64 bits: a 32-bit clock wraps after 2^32 I/Os (about an hour at 1M
  // IOPS), and then the newest streams look oldest and are evicted first.
  uint64_t clock_ = 0;
};

}  // namespace ubcache
