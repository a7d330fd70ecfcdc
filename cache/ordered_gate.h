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
// A write the cache turned away for space alone (past cutoff_writeback_sync,
// or no bucket it could reclaim) need not wait that long: it enters with
// `room_ok`, and if the cache has room again before its epoch comes
// (writeback cleaned buckets: the room test SetRoom gave), it is told
// kRoom and starts over, into the cache. Without that, a cache full of
// dirty epochs over a slow spindle made every such write wait for the whole
// backlog — minutes (bench/run ordered, dbench at 128 clients) — where room
// comes after one pass.
//
// When that room does not come — the cache full of dirty epochs over a
// backing device slower than the writes, their kept versions (rule 12)
// holding the space — a write would still wait for the whole backlog. With
// writeback_order_suspend (the default) the order is suspended instead
// (rule 17): once such a write has waited kSuspendAfterNs for room without
// getting it (suspend_wanted: a short wait for a few epochs' writeback, as
// when the epochs' record reaches its budget, still ends in the cache), the
// writeback thread clears
// the backing superblock's consistent_as_of durably (BackingSuper::
// SuspendOrder) and then calls Suspend; from then on the device behaves as
// in `lba` order — nothing waits here, no kept versions, address-order
// passes — until the thread sees room below cutoff_writeback and calls
// Resume. The epochs up to then may be on the backing device out of order,
// so no time is promised again until they are written back (Writeback::
// NoteProgress, rule 16). Counted (`order_suspensions`) and logged.
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
  // What a waiting request is told: go to the backing device; fail (the
  // device was fenced while it waited); or start over, the cache has room.
  enum class Verdict { kGo, kFenced, kRoom };

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
  // Whether the cache would take a write again (set with SetWake; asked by
  // Advance, from any thread, for waiters that entered with room_ok).
  void SetRoom(std::function<bool()> room) { room_ = std::move(room); }
  // A backing write of the current epoch is about to be issued: `go(kGo)`
  // runs (now, or later on this reactor) once it may be; kFenced if the
  // device was fenced while it waited (the request fails, untouched); with
  // `room_ok`, kRoom if the cache had room first (the request starts over).
  void Enter(Callback<void(Verdict)> go, bool room_ok = false) EXCLUDES(mu_);
  // Writeback made progress (or the order, the cache's state changed):
  // waiters whose epoch has come go, each on its own reactor, and those
  // that may start over do if the cache has room; with `fenced` every
  // waiter, told kFenced (its writes fail).
  void Advance(bool fenced = false) EXCLUDES(mu_);
  bool waiting() const { return nwaiting_.load(std::memory_order_relaxed) > 0; }
  // Whether this device's writes reach the backing device in epoch order
  // now: writeback_order flush, and not suspended. What every engine and
  // the writeback thread ask instead of the knob.
  bool ordered() const;
  // ---- suspension (rule 17), the writeback thread ----
  // How long a write turned away for space waits for room before the
  // order is suspended for it.
  static constexpr uint64_t kSuspendAfterNs = 1'000'000'000;
  // A write turned away for space has waited that long (at `now`), and
  // writeback_order_suspend is on.
  bool suspend_wanted(uint64_t now) const;
  // Only after the backing superblock no longer promises a time: waiters
  // go (Advance), the device acts as in lba order.
  void Suspend() EXCLUDES(mu_);
  void Resume();
  bool suspended() const { return suspended_.load(std::memory_order_acquire); }
  uint64_t suspensions() const { return suspensions_.load(std::memory_order_relaxed); }
  // Whether a backing write of the current epoch would wait now.
  bool WouldWait();

  uint64_t waits() const { return waits_.load(std::memory_order_relaxed); }
  uint64_t wait_us() const { return wait_us_.load(std::memory_order_relaxed); }
  // Waits that ended with kRoom: the write went into the cache after all.
  uint64_t room_retries() const { return room_retries_.load(std::memory_order_relaxed); }

 private:
  struct Waiter {
    uint64_t epoch;
    uint64_t since_ns;
    Reactor* reactor;
    bool room_ok;
    Callback<void(Verdict)> go;
  };
  // Whether a write of `epoch` may reach the backing device now.
  bool MayGo(uint64_t epoch);

  const std::string spec_;
  CacheSet* const set_;
  const uint32_t dev_;
  const WriteEpoch* const epoch_;
  std::function<void()> wake_;
  std::function<bool()> room_;
  Mutex mu_;
  std::vector<Waiter> waiters_ GUARDED_BY(mu_);
  std::atomic<size_t> nwaiting_{0};
  std::atomic<uint64_t> waits_{0}, wait_us_{0}, room_retries_{0};
  uint64_t stopped_logged_ns_ GUARDED_BY(mu_) = 0;
  std::atomic<bool> suspended_{false};
  // Since when the oldest waiter that entered with room_ok waits (0: none).
  std::atomic<uint64_t> room_wait_since_ns_{0};
  void NoteRoomWaitersLocked() REQUIRES(mu_);
  std::atomic<uint64_t> suspensions_{0};
};

}  // namespace ubcache
