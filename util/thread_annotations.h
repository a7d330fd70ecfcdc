// SPDX-License-Identifier: Apache-2.0
// Clang thread-safety annotations (checked with -Wthread-safety), and a
// mutex that carries them. No-ops under GCC.
#pragma once

#include <mutex>

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
#define NO_THREAD_SAFETY_ANALYSIS UB_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace ubcache {

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void AssertHeld() {}
  std::mutex& native() { return mu_; }

 private:
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

}  // namespace ubcache
