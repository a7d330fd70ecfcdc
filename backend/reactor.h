// SPDX-License-Identifier: Apache-2.0
// Reactor: one thread's event loop around its own io_uring.
//
// Every thread that does I/O owns exactly one Reactor; a ring is never shared.
// Devices submit on Reactor::Current(), so a completion always runs on the
// thread that submitted the request. Other threads talk to a reactor only
// through Post(), which queues a function and wakes the ring via an eventfd.
//
// user_data of every SQE is a pointer to an IoCompletion; it is packed in
// PrepareSqe() and unpacked in Dispatch(), and nowhere else.
//
// Thread safety: Post() and Stop() from any thread; everything else only on
// the reactor's own thread (the one inside Run(), or the one that Bind()s it).
#pragma once

#include <liburing.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <queue>
#include <vector>

#include "util/callback.h"
#include "util/status.h"
#include "util/thread_annotations.h"

namespace ubcache {

// Something waiting for one CQE. The reactor calls Complete() with cqe->res
// (a byte count or -errno) and cqe->flags.
class IoCompletion {
 public:
  virtual void Complete(int32_t res, uint32_t cqe_flags) = 0;

 protected:
  ~IoCompletion() = default;
};

class Reactor {
 public:
  static constexpr unsigned kMaxReactors = 256;

  // `entries` SQ entries; the CQ is four times larger so completions are not
  // dropped while a burst of requests is in flight.
  static Result<std::unique_ptr<Reactor>> Create(unsigned entries = 512);
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  // The reactor bound to this thread, or nullptr.
  static Reactor* Current();
  // Makes this reactor the current one for the calling thread (tests and
  // tools that drive a reactor by hand with RunOnce()).
  void Bind();

  // Small dense id (0..kMaxReactors-1) for per-reactor slots in devices.
  unsigned id() const { return id_; }
  io_uring* ring() { return &ring_; }

  // An SQE whose CQE will be delivered to `c`. Never null: when the SQ is
  // full, pending SQEs are submitted first (and if the kernel refuses them
  // because the CQ is full, the ready CQEs are set aside for the next reap).
  io_uring_sqe* PrepareSqe(IoCompletion* c);

  // Runs `fn` on the reactor's thread soon. Any thread.
  void Post(Callback<void()> fn) EXCLUDES(post_mu_);
  // Runs `fn` on this thread after the current callback returns. Reactor
  // thread only. Used to deliver completions that are ready at once without
  // calling back into the submitter's stack.
  void Defer(Callback<void()> fn);
  // Defer(), specialised for the commonest case — delivering a status to a
  // completion — without wrapping (and so allocating) a second callback.
  void DeferDone(Callback<void(Status)> done, Status st);
  // Runs `fn` at or after `deadline_ns` (NowNanos() clock). Reactor thread.
  void RunAt(uint64_t deadline_ns, Callback<void()> fn);

  // Loops until Stop(), and returns only once every Stop() call has
  // finished with the reactor: the thread that runs it may destroy it then.
  void Run();
  // One turn: run deferred work and due timers, submit, reap completions.
  // Waits for at least one event when `wait` and nothing is ready.
  void RunOnce(bool wait);
  // Any thread; Run() returns after its current turn.
  void Stop();
  bool stopped() const { return stop_.load(std::memory_order_acquire); }

  // Runs turns until `done()` is true. For tools and tests.
  template <typename Pred>
  void RunUntil(Pred done) {
    while (!done()) RunOnce(true);
  }

  // Number of SQEs handed out and not yet completed.
  uint64_t inflight() const { return inflight_; }

  // A disk I/O (UringDevice, not a socket; `read`: a read of `len` bytes)
  // submitted on this ring, and its completion. While one or two are in
  // flight, the reactor sleeps instead of spinning; with more reads in
  // flight it spins longer, and longest for a while after more than two
  // small reads were in flight (SpinForWork). Reactor thread.
  void DiskIoStarted(bool read, uint64_t len) {
    disk_inflight_++;
    disk_reads_inflight_ += read;
    if (read && len <= kSmallReadBytes && ++disk_small_reads_inflight_ > kShallowDiskQueue)
      last_small_deep_ns_ = last_reaped_ns_;
  }
  void DiskIoDone(bool read, uint64_t len) {
    disk_inflight_--;
    disk_reads_inflight_ -= read;
    disk_small_reads_inflight_ -= read && len <= kSmallReadBytes;
    disk_reaped_ = true;
  }

 private:
  // How long a recently busy reactor polls before it sleeps (0: never).
  static constexpr uint64_t kSpinNs = 50'000;
  // How long it polls while more than kShallowDiskQueue of its disk reads
  // are in flight: their completions come in bursts with gaps longer than
  // kSpinNs, and sleeping through a gap costs a wakeup per burst.
  static constexpr uint64_t kDeepDiskSpinNs = 200'000;
  // A reactor with at most this many disk I/Os in flight (and at least one)
  // sleeps instead of spinning: its next event is the disk's.
  static constexpr uint64_t kShallowDiskQueue = 2;
  // A deep queue of small reads (more than kShallowDiskQueue reads of at
  // most kSmallReadBytes in flight, seen within kSmallDeepMemoryNs): the
  // reactor polls up to kSmallDeepSpinNs, through the queue's dips too.
  static constexpr uint64_t kSmallReadBytes = 64 << 10;
  static constexpr uint64_t kSmallDeepMemoryNs = 20'000'000;
  static constexpr uint64_t kSmallDeepSpinNs = 1'000'000;
  // Polls the ring until work shows up (true) or the spin's time passes
  // (false).
  bool SpinForWork();
  Reactor() = default;
  class Waker;
  struct Timer {
    uint64_t deadline;
    uint64_t seq;
    mutable Callback<void()> fn;
    bool operator>(const Timer& o) const {
      return deadline != o.deadline ? deadline > o.deadline : seq > o.seq;
    }
  };

  void ArmWaker();
  // Moves every ready CQE to spilled_ without running its completion (we
  // may be inside one), which makes room in the CQ.
  void SpillCompletions();
  // Each returns whether it ran anything.
  bool RunPosted() EXCLUDES(post_mu_);
  bool RunTimers();
  bool RunDeferred();

  io_uring ring_{};
  bool ring_ok_ = false;
  unsigned id_ = 0;
  int event_fd_ = -1;
  uint64_t event_buf_ = 0;
  std::unique_ptr<Waker> waker_;
  uint64_t inflight_ = 0;
  // When the last completion was reaped (NowNanos()); a reactor that was
  // busy a moment ago polls its ring briefly before it sleeps.
  uint64_t last_reaped_ns_ = 0;
  uint64_t disk_inflight_ = 0;
  uint64_t disk_reads_inflight_ = 0;
  // A disk I/O completed in this turn's reap, and when the last such reap
  // was (NowNanos()): a reactor whose disk queue just drained sleeps too.
  bool disk_reaped_ = false;
  uint64_t last_disk_reaped_ns_ = 0;
  // Small reads (kSmallReadBytes) in flight, and when more than
  // kShallowDiskQueue of them last were (the last reap's time: close enough).
  uint64_t disk_small_reads_inflight_ = 0;
  uint64_t last_small_deep_ns_ = 0;
  // A kSmallDeepSpinNs poll ran out with nothing to do; cleared when a
  // kDeepDiskSpinNs one finds work.
  bool long_spin_ran_out_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<int> stoppers_{0};  // Stop() calls still touching event_fd_
  std::atomic<bool> sleeping_{false};

  Mutex post_mu_;
  std::vector<Callback<void()>> posted_ GUARDED_BY(post_mu_);
  std::atomic<bool> has_posted_{false};

  struct DoneItem {
    Callback<void(Status)> done;
    Status st;
  };
  std::vector<Callback<void()>> deferred_;
  std::vector<Callback<void()>> running_;
  std::vector<DoneItem> deferred_done_;
  std::vector<DoneItem> running_done_;
  struct Spilled {
    IoCompletion* c;
    int32_t res;
    uint32_t flags;
  };
  std::vector<Spilled> spilled_;  // reaped early by PrepareSqe, run by the next RunOnce
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  uint64_t timer_seq_ = 0;
};

}  // namespace ubcache
