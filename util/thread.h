// SPDX-License-Identifier: Apache-2.0
// Per-thread settings: names and scheduling.
#pragma once

#include <cstdint>
#include <string>

namespace ubcache {

// Names the calling thread, as `top -H`, `ps -L`, perf and gdb show it
// (Linux keeps at most 15 characters): ub-reactor3, ub-control, ub-refill…
void SetThreadName(const std::string& name);

// Asks the scheduler to run the calling thread in slices of `ns` (clamped
// by the kernel to 0.1–100 ms). Under EEVDF (Linux 6.12 and later) a
// thread with a short slice gets an early deadline when it wakes, so it
// runs at once on a busy CPU instead of waiting for the running thread's
// slice (~3 ms) to end; its share of the CPU stays what its nice value
// gives it. For threads that wake for short, latency-sensitive work (the
// control thread answering a scraper while the I/O threads keep both CPUs
// busy). False where the kernel refused it; older kernels accept and
// ignore it.
bool RequestShortSlice(uint64_t ns);

// Serving reactors (doc/design.md "A serving reactor never waits"). A thread
// whose reactor serves clients (an NBD reactor, a ublk queue) marks itself;
// on it nothing may block on I/O or another thread: no condition-variable
// wait, no sleep, no synchronous metadata I/O. Calls that would (an index
// node that is not in memory, a bucket generation not yet journaled) ask
// IsServingThread() and park the request instead. Thread-local; threads
// start unmarked (tools, tests, the writeback, journal and housekeeping
// threads may wait).
void MarkServingThread(bool serving);
bool IsServingThread();
// Every blocking wait calls this first, `what` naming it. In a build with
// assertions (no NDEBUG: the debug, asan and tsan presets) it aborts with
// that name when the caller is a serving thread; otherwise it does nothing.
void AssertMayBlock(const char* what);
// Marks the calling thread serving for a scope (unit tests that play a
// serving reactor), and restores what it was.
class ServingThreadScope {
 public:
  explicit ServingThreadScope(bool serving = true) : was_(IsServingThread()) {
    MarkServingThread(serving);
  }
  ~ServingThreadScope() { MarkServingThread(was_); }
  ServingThreadScope(const ServingThreadScope&) = delete;
  ServingThreadScope& operator=(const ServingThreadScope&) = delete;

 private:
  bool was_;
};

}  // namespace ubcache
