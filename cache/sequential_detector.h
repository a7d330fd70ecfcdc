// SequentialDetector: bcache's stream detection (request.c,
// check_should_bypass). It remembers the end offsets of the last 128 I/Os;
// an I/O that starts where a remembered one ended, within 5 s, continues
// that stream and adds its length to the stream's run. The caller compares
// the run with the (possibly congestion-shrunk) cutoff.
//
// Thread safety: none. CachedDevice keeps one detector per reactor thread,
// which also keeps one client's streams apart from another's.
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
    uint64_t last = UINT64_MAX;  // end offset of the stream's latest I/O
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
