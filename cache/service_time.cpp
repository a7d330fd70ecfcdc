// SPDX-License-Identifier: Apache-2.0
#include "cache/service_time.h"

namespace ubcache {

namespace {
// The largest request of each class but the last.
constexpr uint64_t kClassBytes[ServiceTime::kClasses - 1] = {4096, 64 << 10, 1 << 20};
}  // namespace

int ServiceTime::ClassOf(uint64_t len) {
  if (len <= kClassBytes[0]) return 0;
  if (len <= kClassBytes[1]) return 1;
  if (len <= kClassBytes[2]) return 2;
  return 3;
}

const char* ServiceTime::ClassName(int cls) {
  static constexpr const char* kNames[kClasses] = {"4k", "64k", "1m", "big"};
  return cls >= 0 && cls < kClasses ? kNames[cls] : "?";
}

void ServiceTime::Observe(Op op, uint64_t len, uint64_t latency_ns, uint64_t now_ns) {
  Class& c = At(op, ClassOf(len));
  uint64_t sample_x16 = latency_ns << kWeightShift;
  uint64_t cur = c.mean_x16.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    if (c.samples.load(std::memory_order_relaxed) == 0 && cur == 0) {
      next = sample_x16;  // the first sample sets the mean
    } else {
      // mean += (sample - mean) / 16, in the x16 fixed point.
      int64_t diff = static_cast<int64_t>(sample_x16) - static_cast<int64_t>(cur);
      next = static_cast<uint64_t>(static_cast<int64_t>(cur) + diff / (1 << kWeightShift));
    }
  } while (!c.mean_x16.compare_exchange_weak(cur, next, std::memory_order_relaxed));
  c.samples.fetch_add(1, std::memory_order_relaxed);
  last_ns_[static_cast<int>(op)].store(now_ns, std::memory_order_relaxed);
}

uint64_t ServiceTime::MeanNs(Op op, int cls) const {
  return At(op, cls).mean_x16.load(std::memory_order_relaxed) >> kWeightShift;
}

uint64_t ServiceTime::Samples(Op op, int cls) const {
  return At(op, cls).samples.load(std::memory_order_relaxed);
}

uint64_t ServiceTime::ExpectNs(Op op, uint64_t len, uint64_t* samples) const {
  int want = ClassOf(len);
  for (int d = 0; d < kClasses; d++) {
    for (int cls : {want - d, want + d}) {
      if (cls < 0 || cls >= kClasses) continue;
      uint64_t n = Samples(op, cls);
      if (n == 0) continue;
      if (samples) *samples = n;
      return MeanNs(op, cls);
    }
  }
  if (samples) *samples = 0;
  return 0;
}

}  // namespace ubcache
