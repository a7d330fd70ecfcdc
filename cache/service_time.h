// SPDX-License-Identifier: Apache-2.0
// ServiceTime: a running picture of what one device's requests take, for
// policies that compare devices by the numbers rather than by their spec
// strings (issue 13: congestion that compares the cache device's expected
// time with the backing device's, devices told apart by measurement).
//
// Per operation (read, write) and size class (up to 4 KiB, 64 KiB, 1 MiB,
// larger) it keeps an exponentially weighted mean of the service time —
// each sample moves the mean by 1/16 of the difference, so the picture
// follows a device whose speed changes within a few dozen requests and one
// outlier moves it by 6 % — and the number of samples. The first sample of
// a class sets its mean.
//
// Thread safety: any thread; each class is two atomics, updated without a
// lock (a compare-and-swap loop on the mean).
#pragma once

#include <atomic>
#include <cstdint>

namespace ubcache {

class ServiceTime {
 public:
  enum class Op : uint8_t { kRead, kWrite };
  static constexpr int kClasses = 4;
  static constexpr unsigned kWeightShift = 4;  // weight 1/16

  // 0: <= 4 KiB, 1: <= 64 KiB, 2: <= 1 MiB, 3: larger.
  static int ClassOf(uint64_t len);
  // "4k", "64k", "1m", "big": the label metrics and ctl use.
  static const char* ClassName(int cls);

  // A request of `len` bytes took `latency_ns`, completing at `now_ns`.
  void Observe(Op op, uint64_t len, uint64_t latency_ns, uint64_t now_ns);
  // The class's mean in ns; 0 when it has no sample.
  uint64_t MeanNs(Op op, int cls) const;
  uint64_t Samples(Op op, int cls) const;
  // What a request of `len` bytes is expected to take: its class's mean,
  // else that of the nearest class with samples (the smaller one first:
  // seek and rotation, or a queue, dominate small and mid-sized requests
  // alike, and a guess by size ratio would be off by the ratio); 0 when the
  // device has no sample of this operation at all.
  // `samples`, when given, gets the sample count behind the answer.
  uint64_t ExpectNs(Op op, uint64_t len, uint64_t* samples = nullptr) const;
  // When the newest sample of `op` (any class) completed; 0 before any.
  uint64_t LastNs(Op op) const { return last_ns_[static_cast<int>(op)].load(std::memory_order_relaxed); }

 private:
  struct Class {
    std::atomic<uint64_t> mean_x16{0};  // ns << kWeightShift
    std::atomic<uint64_t> samples{0};
  };
  Class& At(Op op, int cls) { return classes_[static_cast<int>(op)][cls]; }
  const Class& At(Op op, int cls) const { return classes_[static_cast<int>(op)][cls]; }
  Class classes_[2][kClasses];
  std::atomic<uint64_t> last_ns_[2] = {};
};

}  // namespace ubcache
