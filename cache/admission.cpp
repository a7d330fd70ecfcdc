// SPDX-License-Identifier: Apache-2.0
#include "cache/admission.h"

namespace ubcache {

bool AutoCongested(const ServiceTime& cache, const ServiceTime& backing, ServiceTime::Op op,
                   uint64_t len, uint64_t now_ns) {
  uint64_t cn = 0, bn = 0;
  uint64_t c = cache.ExpectNs(op, len, &cn);
  uint64_t b = backing.ExpectNs(op, len, &bn);
  if (cn < kMinSamples || bn < kMinSamples) return false;  // not evidence enough either way
  uint64_t last = cache.LastNs(op);
  if (now_ns > last && now_ns - last > kProbeNs) return false;  // stale: measure it again
  // Clearly slower only: a fill or a cached write is worth some time now
  // for the reads it will save, and two devices of about one speed must
  // not flap between caching and bypassing on noise.
  return c > b + b / 4 + kCongestionSlackNs;
}

bool SpareSpace(uint64_t spare, uint64_t free_target, uint64_t usable) {
  if (usable == 0 || spare <= free_target) return false;
  return (spare - free_target) * 100 > usable * kSpareFraction;
}

void GhostList::Add(uint32_t dev, uint64_t offset, uint64_t len, uint64_t now_ns) {
  if (len == 0) return;
  const uint64_t end = offset + len;
  for (Entry& e : entries_) {
    // Adjacent or overlapping: one stream, one entry.
    if (e.dev == dev && Live(e, now_ns) && offset <= e.end && end >= e.start) {
      if (offset < e.start) e.start = offset;
      if (end > e.end) e.end = end;
      e.added_ns = now_ns;
      return;
    }
  }
  entries_[next_] = Entry{dev, offset, end, now_ns};
  next_ = (next_ + 1) % kGhostEntries;
}

bool GhostList::Contains(uint32_t dev, uint64_t offset, uint64_t len, uint64_t now_ns) const {
  const uint64_t end = offset + len;
  for (const Entry& e : entries_)
    if (e.dev == dev && Live(e, now_ns) && offset < e.end && end > e.start) return true;
  return false;
}

}  // namespace ubcache
