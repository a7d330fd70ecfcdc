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
// Sync writes in writeback are never sent around the cache by the auto
// policies or the cutoff (bcache's op_is_sync rule, which only its fixed
// congestion overrides): in writeback a bypassed write does not cost its
// own spindle time alone — the next FLUSH must then flush the backing
// device too (doc/design.md "Durability", rule 8), behind whatever
// writeback has queued there, and every fsync waits for it. NBD and ublk
// carry no REQ_SYNC, so "sync" is what they do carry: FUA, or a FLUSH just
// before (SyncHint: the write arrived while a FLUSH of the device was in
// flight, or is the first write since one arrived — a journal commit's
// shape once a loop device or nbdfuse has turned its FUA into FLUSHes).
//
// The bypasses are counted by reason and by operation and hint
// (bypasses(): read, write, write with FUA, write after a FLUSH).
//
// Thread safety: any reactor thread. The stream detector is lock-free and
// one per device (as bcache's per-cached_dev one): a client with several
// connections (nbdfuse, qemu, the kernel's nbd -C) spreads one stream over
// several reactors, and per-reactor detectors each saw only gaps in it.
// Counters and the sync hint are atomics. ghost_mu_ (a leaf lock) guards
// the ghost list, taken only for a stream's request past the cutoff while
// the cache has no space to spare.
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
  // What a bypassed request was, for the counters.
  enum Kind : uint8_t { kRead, kWrite, kWriteFua, kWriteAfterFlush, kKinds };
  // "read", "write", "write_fua", "write_after_flush".
  static const char* KindName(Kind kind);

  BypassPolicy(CacheSet* set, uint32_t dev, const ServiceTime* backing_time)
      : set_(set), dev_(dev), backing_time_(backing_time) {}

  // `around_cache`, when given, is set when the reason is auto congestion:
  // the cache device is expected to be slower than the backing device for
  // this request, so even its clean hits are better read from the backing.
  // A write's kIoAfterFlush is set by MarkSyncHint at its arrival.
  bool ShouldBypass(const IoRequest& req, bool write, bool* around_cache = nullptr)
      EXCLUDES(ghost_mu_);

  // The sync hint, fed at each request's arrival: a FLUSH of the device
  // arrived, was answered; a write arrived — its `flags` get kIoAfterFlush
  // when a FLUSH is in flight or it is the first write since one arrived.
  void FlushArrived() {
    flushes_in_flight_.fetch_add(1, std::memory_order_relaxed);
    write_since_flush_.store(false, std::memory_order_relaxed);
  }
  void FlushAnswered() { flushes_in_flight_.fetch_sub(1, std::memory_order_relaxed); }
  void MarkSyncHint(uint32_t* flags);

  uint64_t bypasses(Kind kind) const { return bypasses_[kind].load(std::memory_order_relaxed); }
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
  bool AdmitStream(const IoRequest& req, uint64_t now_ns) EXCLUDES(ghost_mu_);
  // Counts a bypass of `req` and returns true.
  bool Bypassed(const IoRequest& req, bool write);

  CacheSet* const set_;
  const uint32_t dev_;
  const ServiceTime* const backing_time_;
  std::atomic<uint64_t> sequential_bypasses_{0};
  std::atomic<uint64_t> congested_bypasses_{0};
  std::atomic<uint64_t> auto_congested_bypasses_{0};
  std::atomic<uint64_t> spare_admissions_{0};
  std::atomic<uint64_t> ghost_admissions_{0};
  std::atomic<uint64_t> bypasses_[kKinds] = {};
  // The sync hint: FLUSHes received and not yet answered, and whether a
  // write arrived since the last FLUSH did (starts true: no FLUSH yet).
  std::atomic<uint32_t> flushes_in_flight_{0};
  std::atomic<bool> write_since_flush_{true};
  SequentialDetector detector_;
  Mutex ghost_mu_;
  GhostList ghosts_ GUARDED_BY(ghost_mu_);
};

}  // namespace ubcache
