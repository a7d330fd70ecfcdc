// SPDX-License-Identifier: Apache-2.0
// DeviceActivity: when one cached device last saw a client request, a miss
// that read the backing device, and a write turned away by the writeback
// cutoffs. The engines stamp it; the writeback thread reads it to decide
// its pace (idle: full speed; a reader on the spindle: yield; writes turned
// away: full speed, see cache/writeback.h).
//
// Thread safety: any thread; relaxed atomics (a stale reading only moves a
// pacing decision by one step).
#pragma once

#include <atomic>
#include <cstdint>

namespace ubcache {

class DeviceActivity {
 public:
  // Full speed while a write was turned away by the cutoffs this recently.
  static constexpr uint64_t kCutoffWindowNs = 1'000'000'000;

  void Request(uint64_t now) { last_request_ns_.store(now, std::memory_order_relaxed); }
  void BackingRead(uint64_t now) { last_backing_read_ns_.store(now, std::memory_order_relaxed); }
  // A write turned away by the cutoffs at `now`; returns whether one already
  // was in the kCutoffWindowNs before it.
  bool TurnedAway(uint64_t now) {
    bool recently = TurnedAwayRecently(now);
    last_cutoff_ns_.store(now, std::memory_order_relaxed);
    return recently;
  }

  uint64_t last_request_ns() const { return last_request_ns_.load(std::memory_order_relaxed); }
  uint64_t last_backing_read_ns() const {
    return last_backing_read_ns_.load(std::memory_order_relaxed);
  }
  bool TurnedAwayRecently(uint64_t now) const {
    return now - last_cutoff_ns_.load(std::memory_order_relaxed) < kCutoffWindowNs;
  }

 private:
  std::atomic<uint64_t> last_request_ns_{0};
  std::atomic<uint64_t> last_backing_read_ns_{0};
  std::atomic<uint64_t> last_cutoff_ns_{0};
};

}  // namespace ubcache
