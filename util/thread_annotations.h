// SPDX-License-Identifier: Apache-2.0
// Clang thread-safety annotations (checked with -Wthread-safety), a mutex
// that carries them, and a condition variable that waits on it. No-ops
// under GCC.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "util/thread.h"

#if defined(__clang__)
#define UB_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define UB_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) UB_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY UB_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) UB_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) UB_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) UB_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) UB_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) UB_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) UB_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) UB_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// The function checks (or knows) that the capability is held: from the call
// on, the analysis treats it as held — for a lock taken where the analysis
// cannot follow (a runtime-sized set of locks, a callback run under one).
#define ASSERT_CAPABILITY(x) UB_THREAD_ANNOTATION(assert_capability(x))
#define NO_THREAD_SAFETY_ANALYSIS UB_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace ubcache {

class CondVar;

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds this mutex (not checked at run time).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// A condition variable over a Mutex the caller holds. Every wait releases
// the mutex while it blocks and holds it again when it returns; wakeups may
// be spurious, so wait in a loop on the guarded condition:
//   MutexLock l(&mu_);
//   while (!ready_) cv_.Wait(&mu_);
// (No predicate overloads: the analysis cannot see that a predicate lambda
// runs under the mutex, the loop keeps the guarded reads checked.)
class CondVar {
 public:
  // Never on a serving reactor: AssertMayBlock (util/thread.h) aborts there
  // in builds with assertions.
  void Wait(Mutex* mu) REQUIRES(mu) {
    AssertMayBlock("CondVar::Wait");
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();  // still held: the caller's lock owns it
  }
  // False once `deadline` has passed (the mutex is held again either way).
  template <class Clock, class Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline) REQUIRES(mu) {
    AssertMayBlock("CondVar::WaitUntil");
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    bool woken = cv_.wait_until(l, deadline) == std::cv_status::no_timeout;
    l.release();
    return woken;
  }
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& timeout) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout);
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace ubcache
