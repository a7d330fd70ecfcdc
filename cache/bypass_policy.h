// SPDX-License-Identifier: Apache-2.0
// BypassPolicy: whether one cached device's request goes around the cache —
// bcache's check_should_bypass. A request whose stream (SequentialDetector)
// reaches sequential_cutoff, or the congested cutoff while the cache device
// is slow, is not inserted. With the knobs at "auto" (as shipped) the rules
// of cache/admission.h decide instead: congestion compares the cache
// device's measured service time with the backing device's, and streams are
// admitted while there is space to spare or when they are read again
// (ghost list). Shared by the read and write engines.
//
// Thread safety: any reactor thread. One detector for the device, as
// bcache's per-cached_dev one, under detector_mu_ (a leaf lock): a client
// with several connections (nbdfuse, qemu, the kernel's nbd -C) spreads one
// stream over several reactors, and per-reactor detectors each saw only
// gaps in it.
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/block_device.h"
#include "cache/admission.h"
#include "cache/sequential_detector.h"
#include "util/thread_annotations.h"

namespace ubcache {

class CacheSet;
class ServiceTime;

class BypassPolicy {
 public:
  BypassPolicy(CacheSet* set, uint32_t dev, const ServiceTime* backing_time)
      : set_(set), dev_(dev), backing_time_(backing_time) {}

  // `around_cache`, when given, is set when the reason is auto congestion:
  // the cache device is expected to be slower than the backing device for
  // this request, so even its clean hits are better read from the backing.
  bool ShouldBypass(const IoRequest& req, bool write, bool* around_cache = nullptr)
      EXCLUDES(detector_mu_);

  uint64_t sequential_bypasses() const {
    return sequential_bypasses_.load(std::memory_order_relaxed);
  }
  uint64_t congested_bypasses() const {
    return congested_bypasses_.load(std::memory_order_relaxed);
  }
  uint64_t auto_congested_bypasses() const {
    return auto_congested_bypasses_.load(std::memory_order_relaxed);
  }
  uint64_t spare_admissions() const { return spare_admissions_.load(std::memory_order_relaxed); }
  uint64_t ghost_admissions() const { return ghost_admissions_.load(std::memory_order_relaxed); }

 private:
  // sequential_cutoff auto: whether a stream's request is cached anyway.
  bool AdmitStream(const IoRequest& req, uint64_t now_ns) EXCLUDES(detector_mu_);

  CacheSet* const set_;
  const uint32_t dev_;
  const ServiceTime* const backing_time_;
  std::atomic<uint64_t> sequential_bypasses_{0};
  std::atomic<uint64_t> congested_bypasses_{0};
  std::atomic<uint64_t> auto_congested_bypasses_{0};
  std::atomic<uint64_t> spare_admissions_{0};
  std::atomic<uint64_t> ghost_admissions_{0};
  Mutex detector_mu_;
  SequentialDetector detector_ GUARDED_BY(detector_mu_);
  GhostList ghosts_ GUARDED_BY(detector_mu_);
};

}  // namespace ubcache
