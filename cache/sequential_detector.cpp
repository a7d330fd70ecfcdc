// SPDX-License-Identifier: Apache-2.0
#include "cache/sequential_detector.h"

namespace ubcache {

uint64_t SequentialDetector::Observe(uint32_t dev, uint64_t offset, uint64_t len, uint64_t now_ns) {
  // bcache hashes the start sector into a small table; a linear scan of 128
  // entries is as fast here and finds the adjacent streams exactly.
  Recent* after = nullptr;   // the stream this I/O continues (it ended at offset)
  Recent* before = nullptr;  // the stream this I/O precedes (it starts at offset + len)
  Recent* oldest = &recent_[0];
  for (Recent& r : recent_) {
    if (r.dev == dev && now_ns < r.expires) {
      if (!after && r.last == offset) after = &r;
      else if (!before && r.first == offset + len) before = &r;
    }
    if (r.lru < oldest->lru) oldest = &r;
  }
  Recent* s = after ? after : before;
  if (!s) {
    s = oldest;  // a new stream replaces the least recently used one
    s->dev = dev;
    s->first = offset;
    s->last = offset + len;
    s->run = 0;
  } else if (after && before) {
    // This I/O fills the gap between two pieces of one stream that arrived
    // out of order: one stream again.
    after->last = before->last;
    after->run += before->run;
    *before = Recent{};
  } else if (after) {
    after->last = offset + len;
  } else {
    before->first = offset;
  }
  s->run += len;
  s->expires = now_ns + kExpiryNanos;
  s->lru = ++clock_;
  return s->run;
}

}  // namespace ubcache
