#include "cache/sequential_detector.h"

namespace ubcache {

uint64_t SequentialDetector::Observe(uint32_t dev, uint64_t offset, uint64_t len, uint64_t now_ns) {
  // bcache hashes the start sector into a small table; a linear scan of 128
  // entries is as fast here and finds the continued stream exactly.
  Recent* hit = nullptr;
  Recent* oldest = &recent_[0];
  for (Recent& r : recent_) {
    if (r.dev == dev && r.last == offset && now_ns < r.expires) {
      hit = &r;
      break;
    }
    if (r.lru < oldest->lru) oldest = &r;
  }
  if (!hit) {
    hit = oldest;  // a new stream replaces the least recently used one
    hit->dev = dev;
    hit->run = 0;
  }
  hit->run += len;
  hit->last = offset + len;
  hit->expires = now_ns + kExpiryNanos;
  hit->lru = ++clock_;
  return hit->run;
}

}  // namespace ubcache
