// SPDX-License-Identifier: Apache-2.0
#include "util/thread.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace ubcache {

namespace {

// The kernel's struct sched_attr (linux/sched/types.h, which cannot be
// included next to glibc's sched.h).
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};

}  // namespace

namespace {
thread_local bool serving_thread = false;
}  // namespace

void MarkServingThread(bool serving) { serving_thread = serving; }
bool IsServingThread() { return serving_thread; }

void AssertMayBlock([[maybe_unused]] const char* what) {
#ifndef NDEBUG
  if (serving_thread) {
    // Straight to stderr: the process ends on the next line.
    std::fprintf(stderr, "ubcache: a serving reactor would block: %s\n", what);
    std::abort();
  }
#endif
}

void SetThreadName(const std::string& name) { pthread_setname_np(pthread_self(), name.substr(0, 15).c_str()); }

bool RequestShortSlice(uint64_t ns) {
  // glibc 2.36 has no sched_setattr wrapper. For SCHED_OTHER the kernel
  // reads sched_runtime as the slice; the nice value is restated as is.
  SchedAttr a{};
  a.size = sizeof a;
  a.sched_policy = 0;  // SCHED_NORMAL
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  a.sched_nice = errno ? 0 : nice;
  a.sched_runtime = ns;
  return syscall(SYS_sched_setattr, 0, &a, 0u) == 0;
}

}  // namespace ubcache
