// SPDX-License-Identifier: Apache-2.0
// Admission: the "auto" policies, which decide from measurements rather
// than from bcache's fixed numbers whether a request goes around the cache
// (issue 13; the rules and their constants are in doc/design.md, "Auto
// policies").
//
// Congestion that compares (congested_*_threshold_us auto). bcache calls
// the cache congested when its completions pass a fixed latency, 2 ms for
// reads: a deep NVMe queue at 2.5 ms then bypasses in front of a 6 ms
// spindle, where the cache was still twice as fast. Here the cache is
// congested for a request only when the cache device is expected to take
// longer for it than the backing device: both are measured (ServiceTime,
// per operation and size class), so a spindle, an NBD export over a slow
// link and a fast network store are told apart by their numbers. Without
// kMinSamples of both in the class compared there is no evidence (the
// first sample sets a mean, and one scheduling hiccup is not a slow
// device), and nothing bypasses. "Slower"
// means clearly slower: by a quarter of the backing device's time plus
// kCongestionSlackNs, so that two devices of about one speed do not flap
// between caching and bypassing on noise (a fill pays later). A cache
// device whose newest sample of the operation is older than kProbeNs is
// not trusted to be slow still: the request goes to it and measures it
// again (bypassed writes would otherwise never refresh the cache's write
// time, and a congestion that has cleared would bypass for ever). A read
// that bypasses for it reads its clean hits from the backing device too
// (CachedDevice::DoRead): bcache's congestion only stops fills, but here
// the rule has just said the backing device answers sooner.
//
// Sequential cutoff that learns (sequential_cutoff auto). A stream (a run
// of at least kAutoStreamBytes, bcache's 4 MiB) is admitted while the cache
// has space to spare — more than kSpareFraction of its usable buckets free
// beyond the allocator's own reserve, or dead (GC found nothing live in
// them: overwritten, discarded or invalidated data) — since caching it
// then evicts nothing. Space that is merely old is not spare: a nightly
// backup runs after hours in which the day's hot set was not touched, and
// by any clock that set looks cold; what the cutoff protects is exactly
// that set. Past that it bypasses, as bcache's cutoff would, and its range
// goes on a ghost list; a later request that overlaps a ghost range within
// kGhostNanos is admitted: the stream is being re-read, so it is worth the
// space. A ghost list of ranges, rather than per-block history, because a
// stream's requests are contiguous: one entry covers a whole stream,
// bounded at kGhostEntries (16 KiB) however large the device.
//
// Thread safety: AutoCongested and SpareSpace are pure functions of
// thread-safe inputs; GhostList has none (BypassPolicy keeps it under its
// ghost_mu_).
#pragma once

#include <array>
#include <cstdint>

#include "cache/service_time.h"

namespace ubcache {

inline constexpr uint64_t kProbeNs = 100'000'000;  // 100 ms
inline constexpr uint64_t kCongestionSlackNs = 100'000;  // 100 us
inline constexpr uint64_t kMinSamples = 8;  // per device, in the class compared
inline constexpr uint64_t kAutoStreamBytes = 4u << 20;
inline constexpr unsigned kSpareFraction = 10;  // percent of usable buckets

// True when a request of `len` bytes is expected to be slower on the cache
// device than on the backing device (and the cache's picture is fresh).
bool AutoCongested(const ServiceTime& cache, const ServiceTime& backing, ServiceTime::Op op,
                   uint64_t len, uint64_t now_ns);

// True when the cache has space to spare for a stream: `spare` buckets
// (free or dead) beyond `free_target` (the allocator's reserve) are more
// than kSpareFraction percent of the `usable` buckets.
bool SpareSpace(uint64_t spare, uint64_t free_target, uint64_t usable);

class GhostList {
 public:
  static constexpr unsigned kGhostEntries = 512;
  static constexpr uint64_t kGhostNanos = 600'000'000'000ull;  // 10 min

  // A bypassed request: extends the live entry it is adjacent to or
  // overlaps, else replaces the oldest entry.
  void Add(uint32_t dev, uint64_t offset, uint64_t len, uint64_t now_ns);
  // True when [offset, offset+len) overlaps a range bypassed within
  // kGhostNanos.
  bool Contains(uint32_t dev, uint64_t offset, uint64_t len, uint64_t now_ns) const;

 private:
  struct Entry {
    uint32_t dev = 0;
    uint64_t start = 0, end = 0;  // end == start: empty
    uint64_t added_ns = 0;        // last extended
  };
  bool Live(const Entry& e, uint64_t now_ns) const {
    // Clocks read on other threads just before may be a little behind.
    return e.end > e.start && (now_ns < e.added_ns || now_ns - e.added_ns < kGhostNanos);
  }
  std::array<Entry, kGhostEntries> entries_{};
  unsigned next_ = 0;  // the oldest entry: entries are replaced in turn
};

}  // namespace ubcache
