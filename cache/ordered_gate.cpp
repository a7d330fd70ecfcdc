// SPDX-License-Identifier: Apache-2.0
#include "cache/ordered_gate.h"

#include <cassert>
#include <optional>

#include "btree/write_epoch.h"
#include "cache/cache_set.h"
#include "util/clock.h"
#include "util/log.h"

namespace ubcache {

OrderedGate::~OrderedGate() {
  // A waiter is a request in flight, and its continuation uses the cached
  // device that is going away: running it later would be a use after free,
  // so it is dropped (its client gets no answer) — and the assertion says
  // the caller broke the rule that requests are answered first.
  MutexLock l(&mu_);
  if (!waiters_.empty())
    UB_ERROR("{}: {} requests still waited for writeback when the device went away", spec_, waiters_.size());
  assert(waiters_.empty());
}

bool OrderedGate::ordered() const {
  return set_->knobs().writeback_order.load(std::memory_order_relaxed) == WritebackOrder::kFlush &&
         !suspended_.load(std::memory_order_acquire);
}

void OrderedGate::Suspend() {
  {
    // Under mu_, as Enter: a writer that saw the order still in force has
    // entered its waiter before Advance below looks.
    MutexLock l(&mu_);
    suspended_.store(true, std::memory_order_release);
  }
  suspensions_.fetch_add(1, std::memory_order_relaxed);
  Advance();
}

void OrderedGate::Resume() { suspended_.store(false, std::memory_order_release); }

bool OrderedGate::suspend_wanted(uint64_t now) const {
  const uint64_t since = room_wait_since_ns_.load(std::memory_order_acquire);
  // `now` may have been read before the waiter entered (the writeback
  // thread reads the clock at the top of its loop): no wraparound.
  return since != 0 && now > since && now - since >= kSuspendAfterNs &&
         set_->knobs().writeback_order_suspend.load(std::memory_order_relaxed);
}

void OrderedGate::NoteRoomWaitersLocked() {
  uint64_t since = 0;
  for (const Waiter& w : waiters_)
    if (w.room_ok && (since == 0 || w.since_ns < since)) since = w.since_ns;
  room_wait_since_ns_.store(since, std::memory_order_release);
}

bool OrderedGate::MayGo(uint64_t epoch) {
  if (!ordered()) return true;
  // Nothing to keep in order: a failed cache's dirty data stays where it is.
  if (set_->failed()) return true;
  std::optional<uint64_t> oldest = set_->index().OldestEpoch(dev_);
  return !oldest || *oldest >= epoch;
}

bool OrderedGate::WouldWait() {
  if (!ordered() || set_->buckets().dirty_buckets() == 0)
    return false;
  return !MayGo(epoch_->current());
}

void OrderedGate::Enter(Callback<void(Verdict)> go, bool room_ok) {
  // The common case costs one load: no dirty data in the set at all
  // (kept versions count into their buckets, rule 15).
  if (!ordered() || set_->buckets().dirty_buckets() == 0) {
    go(Verdict::kGo);
    return;
  }
  const uint64_t epoch = epoch_->current();
  bool waits = false;
  {
    // Under mu_, as Advance: writeback cannot finish the last older epoch
    // between this check and the waiter's entry without seeing it.
    MutexLock l(&mu_);
    if (!MayGo(epoch)) {
      waits = true;
      uint64_t now = NowNanos();
      waiters_.push_back({epoch, now, Reactor::Current(), room_ok, std::move(go)});
      nwaiting_.store(waiters_.size(), std::memory_order_relaxed);
      waits_.fetch_add(1, std::memory_order_relaxed);
      // Turned away for space: if no room comes, rather than the whole
      // backlog the order is suspended (rule 17, the writeback thread).
      if (room_ok && room_wait_since_ns_.load(std::memory_order_relaxed) == 0)
        room_wait_since_ns_.store(now, std::memory_order_release);
      if (!set_->knobs().writeback_running.load(std::memory_order_relaxed) &&
          now - stopped_logged_ns_ >= 10'000'000'000) {
        stopped_logged_ns_ = now;
        UB_INFO("{}: writes to the backing device wait for older epochs to be written back (writeback_order "
                "flush); writeback runs for them although writeback_running is 0",
                spec_);
      }
    }
  }
  if (!waits)
    go(Verdict::kGo);
  else if (wake_)
    wake_();
}

void OrderedGate::Advance(bool fenced) {
  if (!waiting()) return;
  std::vector<std::pair<Waiter, Verdict>> ready;
  {
    MutexLock l(&mu_);
    // Asked at most once a call, and only if someone may use the answer.
    std::optional<bool> room;
    for (size_t i = 0; i < waiters_.size();) {
      Verdict v = Verdict::kGo;
      bool done = fenced || MayGo(waiters_[i].epoch);
      if (fenced) {
        v = Verdict::kFenced;
      } else if (!done && waiters_[i].room_ok && room_) {
        if (!room) room = room_();
        done = *room;
        v = Verdict::kRoom;
      }
      if (done) {
        ready.emplace_back(std::move(waiters_[i]), v);
        waiters_[i] = std::move(waiters_.back());
        waiters_.pop_back();
      } else {
        i++;
      }
    }
    nwaiting_.store(waiters_.size(), std::memory_order_relaxed);
    if (!ready.empty()) NoteRoomWaitersLocked();
  }
  uint64_t now = NowNanos();
  for (auto& [w, v] : ready) {
    wait_us_.fetch_add((now - w.since_ns) / 1000, std::memory_order_relaxed);
    if (v == Verdict::kRoom) room_retries_.fetch_add(1, std::memory_order_relaxed);
    w.reactor->Post([go = std::move(w.go), v = v]() mutable { go(v); });
  }
}

}  // namespace ubcache
