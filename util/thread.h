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

}  // namespace ubcache
