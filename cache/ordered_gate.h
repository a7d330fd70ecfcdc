// SPDX-License-Identifier: Apache-2.0
// OrderedGate: rule 14's wait (doc/design.md "Durability"). In `flush`
// order the backing device must only ever hold a state a power cut could
// have left, so a client write or discard that goes to the backing device
// directly — the cache could not take it (past cutoff_writeback_sync, no
// space), the mode is writearound or none while dirty data from before a
// switch remains, a discard or write-zeroes — must not get there ahead of
// older epochs still dirty in the cache. It waits here until writeback has
// reached its epoch: no dirty extent or kept version of an older epoch is
// left for the device (writeback marks an epoch clean only after a backing
// flush, rule 13). Then it goes; its own epoch and later ones are written
// back after it only once a backing flush covers it: each `flush`-order
// pass first flushes the backing device if a client write completed there
// since the last flush (Writeback::Pass, BackingDurability::
// FlushForClient). A write still in flight when writeback passes its epoch
// was not yet acknowledged, so no later write the client issued can depend
// on it.
//
// A wait costs the client the time writeback needs to reach the epoch:
// counted (`ordered_waits`, `ordered_wait_us`), and while anything waits
// the writeback thread runs at full speed, even with writeback_running 0
// (Writeback::Loop asks waiting()). Nothing waits in `lba` order, on a
// failed or fenced cache, or while the cache set holds no dirty data.
//
// Thread safety: Enter on a reactor (the continuation runs on it); Advance
// and the counters from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/reactor.h"
#include "util/callback.h"
#include "util/thread_annotations.h"

namespace ubcache {

class CacheSet;
class WriteEpoch;

class OrderedGate {
 public:
  OrderedGate(std::string spec, CacheSet* set, uint32_t dev, const WriteEpoch* epoch)
      : spec_(std::move(spec)), set_(set), dev_(dev), epoch_(epoch) {}
  // A cached device goes away only after its requests were answered, so
  // nothing waits here any more.
  ~OrderedGate();
  OrderedGate(const OrderedGate&) = delete;
  OrderedGate& operator=(const OrderedGate&) = delete;

  // Called when a write has to wait: the writeback thread's kick. Set once,
  // before the first request (a device without writeback has no dirty data).
  void SetWake(std::function<void()> wake) { wake_ = std::move(wake); }
  // A backing write of the current epoch is about to be issued: `go(true)`
  // runs (now, or later on this reactor) once it may be; `go(false)` if the
  // device was fenced while it waited (the request fails, untouched).
  void Enter(Callback<void(bool)> go) EXCLUDES(mu_);
  // Writeback made progress (or the order, the cache's state changed):
  // waiters whose epoch has come go, each on its own reactor; with `all`
  // every waiter, with go(false) (the device was fenced: its writes fail).
  void Advance(bool fenced = false) EXCLUDES(mu_);
  bool waiting() const { return nwaiting_.load(std::memory_order_relaxed) > 0; }
  // Whether a backing write of the current epoch would wait now.
  bool WouldWait();

  uint64_t waits() const { return waits_.load(std::memory_order_relaxed); }
  uint64_t wait_us() const { return wait_us_.load(std::memory_order_relaxed); }

 private:
  struct Waiter {
    uint64_t epoch;
    uint64_t since_ns;
    Reactor* reactor;
    Callback<void(bool)> go;
  };
  // Whether a write of `epoch` may reach the backing device now.
  bool MayGo(uint64_t epoch);

  const std::string spec_;
  CacheSet* const set_;
  const uint32_t dev_;
  const WriteEpoch* const epoch_;
  std::function<void()> wake_;
  Mutex mu_;
  std::vector<Waiter> waiters_ GUARDED_BY(mu_);
  std::atomic<size_t> nwaiting_{0};
  std::atomic<uint64_t> waits_{0}, wait_us_{0};
  uint64_t stopped_logged_ns_ GUARDED_BY(mu_) = 0;
};

}  // namespace ubcache
