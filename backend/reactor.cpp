// SPDX-License-Identifier: Apache-2.0
#include "backend/reactor.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cassert>
#include <mutex>
#include <thread>

#include "util/clock.h"
#include "util/thread.h"

namespace ubcache {

namespace {

thread_local Reactor* tls_current = nullptr;

std::mutex ids_mu;
std::vector<bool> ids_used(Reactor::kMaxReactors, false);

unsigned AllocId() {
  std::lock_guard<std::mutex> l(ids_mu);
  for (unsigned i = 0; i < Reactor::kMaxReactors; i++) {
    if (!ids_used[i]) {
      ids_used[i] = true;
      return i;
    }
  }
  return Reactor::kMaxReactors;
}

void FreeId(unsigned id) {
  std::lock_guard<std::mutex> l(ids_mu);
  if (id < Reactor::kMaxReactors) ids_used[id] = false;
}

}  // namespace

// Re-arms a read on the eventfd each time it fires, so Post() can wake a
// reactor that sleeps in io_uring_enter.
class Reactor::Waker final : public IoCompletion {
 public:
  explicit Waker(Reactor* r) : r_(r) {}
  void Complete(int32_t res, uint32_t) override {
    if (r_->stopped() && res < 0) return;
    r_->ArmWaker();
  }

 private:
  Reactor* r_;
};

Result<std::unique_ptr<Reactor>> Reactor::Create(unsigned entries) {
  std::unique_ptr<Reactor> r(new Reactor());
  io_uring_params p{};
  // No IORING_SETUP_SINGLE_ISSUER: it binds the ring to the creating thread,
  // and reactors are created on one thread and Run() on their own.
  // TASKRUN_FLAG lets a spinning reactor see pending task work (a socket
  // that became readable) without a system call.
  p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  p.cq_entries = entries * 4;
  int ret = io_uring_queue_init_params(entries, &r->ring_, &p);
  if (ret == -EINVAL) {
    // Older kernels lack COOP_TASKRUN; it is only a hint.
    p = io_uring_params{};
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = entries * 4;
    ret = io_uring_queue_init_params(entries, &r->ring_, &p);
  }
  if (ret < 0) return Status::FromErrno(ret, "io_uring_queue_init");
  r->ring_ok_ = true;
  r->id_ = AllocId();
  if (r->id_ >= kMaxReactors) return Status::NoSpace("too many reactors");
  r->event_fd_ = eventfd(0, EFD_CLOEXEC);
  if (r->event_fd_ < 0) return Status::FromErrno(errno, "eventfd");
  r->waker_ = std::make_unique<Waker>(r.get());
  r->ArmWaker();
  return r;
}

Reactor::~Reactor() {
  if (tls_current == this) tls_current = nullptr;
  if (ring_ok_) io_uring_queue_exit(&ring_);
  if (event_fd_ >= 0) close(event_fd_);
  FreeId(id_);
}

Reactor* Reactor::Current() { return tls_current; }

void Reactor::Bind() { tls_current = this; }

io_uring_sqe* Reactor::PrepareSqe(IoCompletion* c) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  while (sqe == nullptr) {
    // -EBUSY: the CQ overflowed and the kernel takes no more until we reap.
    if (io_uring_submit(&ring_) == -EBUSY) SpillCompletions();
    sqe = io_uring_get_sqe(&ring_);
  }
  io_uring_sqe_set_data(sqe, c);
  inflight_++;
  return sqe;
}

void Reactor::SpillCompletions() {
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
    spilled_.push_back({static_cast<IoCompletion*>(io_uring_cqe_get_data(cqe)), cqe->res, cqe->flags});
    io_uring_cqe_seen(&ring_, cqe);
  }
}

void Reactor::ArmWaker() {
  io_uring_sqe* sqe = PrepareSqe(waker_.get());
  io_uring_prep_read(sqe, event_fd_, &event_buf_, sizeof event_buf_, 0);
}

void Reactor::Post(Callback<void()> fn) {
  {
    MutexLock l(&post_mu_);
    posted_.push_back(std::move(fn));
  }
  has_posted_.store(true, std::memory_order_release);
  if (Current() != this) {
    uint64_t one = 1;
    // A failed write only means the counter is already non-zero: the
    // reactor will wake anyway.
    [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof one);
  }
}

void Reactor::Defer(Callback<void()> fn) { deferred_.push_back(std::move(fn)); }

void Reactor::DeferDone(Callback<void(Status)> done, Status st) {
  deferred_done_.push_back(DoneItem{std::move(done), std::move(st)});
}

void Reactor::RunAt(uint64_t deadline_ns, Callback<void()> fn) {
  timers_.push(Timer{deadline_ns, timer_seq_++, std::move(fn)});
}

void Reactor::Stop() {
  // Counted around the eventfd write, so Run() does not return (and its
  // owner destroy the reactor, closing the eventfd) while this thread is
  // still writing to it — the fd number could be someone else's by then.
  stoppers_.fetch_add(1, std::memory_order_acq_rel);
  stop_.store(true, std::memory_order_release);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof one);
  stoppers_.fetch_sub(1, std::memory_order_acq_rel);
}

bool Reactor::RunPosted() {
  if (!has_posted_.load(std::memory_order_acquire)) return false;
  std::vector<Callback<void()>> batch;
  {
    MutexLock l(&post_mu_);
    batch.swap(posted_);
    has_posted_.store(false, std::memory_order_relaxed);
  }
  for (auto& fn : batch) fn();
  return !batch.empty();
}

bool Reactor::RunTimers() {
  if (timers_.empty()) return false;
  uint64_t now = NowNanos();
  bool ran = false;
  while (!timers_.empty() && timers_.top().deadline <= now) {
    Callback<void()> fn = std::move(timers_.top().fn);
    timers_.pop();
    fn();
    ran = true;
  }
  return ran;
}

bool Reactor::RunDeferred() {
  bool ran = false;
  // Deferred work may defer more; run in rounds so each round sees a stable list.
  while (!deferred_.empty() || !deferred_done_.empty()) {
    running_done_.swap(deferred_done_);
    for (auto& item : running_done_) item.done(std::move(item.st));
    running_done_.clear();
    running_.swap(deferred_);
    for (auto& fn : running_) fn();
    running_.clear();
    ran = true;
  }
  return ran;
}

void Reactor::Run() {
  Bind();
  while (!stopped()) RunOnce(true);
  while (stoppers_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
}

void Reactor::RunOnce(bool wait) {
  // Work that ran this turn may have made the caller's condition true, so
  // only an idle turn may sleep.
  bool progress = RunPosted();
  progress |= RunTimers();
  progress |= RunDeferred();

  bool can_sleep =
      wait && !progress && spilled_.empty() && !has_posted_.load(std::memory_order_acquire) && !stopped();
  __kernel_timespec ts{};
  __kernel_timespec* tsp = nullptr;
  if (can_sleep && !timers_.empty()) {
    uint64_t now = NowNanos();
    uint64_t due = timers_.top().deadline;
    uint64_t delta = due > now ? due - now : 0;
    ts.tv_sec = static_cast<int64_t>(delta / 1'000'000'000ull);
    ts.tv_nsec = static_cast<long long>(delta % 1'000'000'000ull);
    tsp = &ts;
    if (delta == 0) can_sleep = false;
  }
  if (can_sleep && SpinForWork()) can_sleep = false;
  io_uring_cqe* cqe = nullptr;
  int ret;
  if (can_sleep) {
    if (tsp)
      ret = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, tsp, nullptr);
    else
      ret = io_uring_submit_and_wait(&ring_, 1);
  } else {
    ret = io_uring_submit(&ring_);
  }
  (void)ret;  // -ETIME / -EINTR just mean "look again"

  // Reap what is there: first what PrepareSqe set aside, then the CQ. Each
  // CQE is marked seen before its completion runs, because a completion may
  // submit (and even wait on) the ring again.
  bool reaped = !spilled_.empty();
  if (reaped) {
    std::vector<Spilled> batch;  // local: a completion may run a nested turn
    batch.swap(spilled_);
    for (const Spilled& x : batch) {
      inflight_--;
      if (x.c) x.c->Complete(x.res, x.flags);
    }
  }
  while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
    auto* c = static_cast<IoCompletion*>(io_uring_cqe_get_data(cqe));
    int32_t res = cqe->res;
    uint32_t flags = cqe->flags;
    io_uring_cqe_seen(&ring_, cqe);
    inflight_--;
    reaped = true;
    if (c) c->Complete(res, flags);
  }
  if (reaped) last_reaped_ns_ = NowNanos();
  if (disk_reaped_) {
    last_disk_reaped_ns_ = last_reaped_ns_;
    disk_reaped_ = false;
  }
}

bool Reactor::SpinForWork() {
  // A request/reply peer (an NBD client) sends its next request a few
  // microseconds after our reply. Sleeping in io_uring_enter for it makes
  // the peer's send pay for waking us (and often the scheduler puts us on
  // the peer's CPU, preempting it), so a reactor that reaped something
  // recently first polls its rings for a short while, without system calls.
  //
  // Not while this reactor waits for a shallow disk queue (one or two of
  // its own disk I/Os in flight: a file read at QD1): the next event is the
  // disk's, tens of microseconds away, and on a small machine the spin
  // takes the CPU that the client, the disk's interrupts (and, in a VM, the
  // host's emulation of the disk) need. Measured on a 2-vCPU VM, 4 KiB
  // reads of a file export at QD1: p50 85-89 -> 68-73 us, half the CPU
  // per request; a mem: export (no disk) and QD32 (completions every few
  // microseconds) keep spinning: QD32 the same within noise (issue 28).
  //
  // Only a serving reactor spins (util/thread.h): the others (ub-nodeio,
  // writeback, housekeeping) have no such peer — their next event is a
  // disk completion or another thread's post — and on a small machine
  // their spin takes the CPU the serving reactor and the client need.
  if (kSpinNs == 0 || last_reaped_ns_ == 0 || !IsServingThread()) return false;
  // A deep queue of small reads (cache hits or a file export's 4 KiB reads
  // at QD32) lately: the disk completes them in bursts — a batch submitted
  // together comes back together, 200-300 us later — and between bursts
  // the queue dips (the replies are out, the client's next requests not
  // yet in) and gaps run past kDeepDiskSpinNs. A reactor that sleeps there
  // pays a wakeup (on a VM, the halted vCPU's) that holds the whole next
  // burst, and the disk idles meanwhile. So it polls up to
  // kSmallDeepSpinNs, dips and drains included, until kSmallDeepMemoryNs
  // pass without such a queue. Large reads (1 MiB) keep kDeepDiskSpinNs:
  // each is worth a wakeup, and polling through their gaps would triple
  // their CPU. A long poll that runs out is not repeated until a
  // kDeepDiskSpinNs one finds work: a slow device's small reads (a
  // spindle's, milliseconds apart) are not polled for. Measured, 2-vCPU
  // VM, cache hits at QD32, 8 rounds alternated with the minimal io_uring
  // responder (issue 28): 0.93x -> 0.955x of the responder's IOPS (+4 %
  // over the rounds, 7 of 8 better), the disk busy 80 % -> 85 % of the
  // time (the responder 84 %).
  const bool small_deep = !long_spin_ran_out_ && last_small_deep_ns_ != 0 &&
                          last_reaped_ns_ - last_small_deep_ns_ < kSmallDeepMemoryNs;
  if (!small_deep && disk_inflight_ > 0 && disk_inflight_ <= kShallowDiskQueue) return false;
  uint64_t now = NowNanos();
  // Nor right after its last disk I/O completed with none left in flight
  // (a file export or a cache hit at QD1, between its reply and the next
  // request): the client needs the CPU to take the reply and send that
  // request. Measured, 2-vCPU VM, 4 KiB reads of a file export at QD1:
  // p50 76 -> 72 us and 43 -> 36 us of CPU per request without any spin,
  // while a mem: export (no disk) needs it: p50 22 us with, 54 without.
  if (!small_deep && disk_inflight_ == 0 && now - last_disk_reaped_ns_ < kSpinNs) return false;
  // A deep queue of disk reads (a file export or cache hits at QD32): the
  // disk completes in bursts — a batch of reads submitted together comes
  // back together — with gaps between them longer than kSpinNs. A reactor
  // that sleeps through each gap pays a wakeup per burst (on a VM, the
  // halted vCPU's), and that delay holds every request of the next burst:
  // 4 KiB reads of a file export at QD32, 2-vCPU VM, 66-68k IOPS with the
  // short spin, 89-91k with 200 us (the raw file 117k; a minimal io_uring
  // responder 68-70k, 87-88k, 92-93k with none, 50 and 200 us). Not for
  // writes: writeback 4 KiB writes at QD32 kept their IOPS with it and paid
  // 0.5-1.7 us more CPU per write.
  const bool deep = !small_deep && disk_reads_inflight_ > kShallowDiskQueue;
  const uint64_t spin = small_deep ? kSmallDeepSpinNs : deep ? kDeepDiskSpinNs : kSpinNs;
  if (now - last_reaped_ns_ > spin) return false;
  io_uring_submit(&ring_);  // what this turn prepared goes out first
  uint64_t until = now + spin;
  for (unsigned i = 0;; i++) {
    if (io_uring_cq_ready(&ring_) > 0 ||
        (IO_URING_READ_ONCE(*ring_.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) ||
        has_posted_.load(std::memory_order_acquire) || stopped()) {
      if (deep) long_spin_ran_out_ = false;
      return true;
    }
    if ((i & 63) == 63 && NowNanos() >= until) {
      if (small_deep) long_spin_ran_out_ = true;
      return false;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

}  // namespace ubcache
