// SPDX-License-Identifier: Apache-2.0
#include "cache/sequential_detector.h"

#include <algorithm>

namespace ubcache {

namespace {

constexpr uint64_t kSector = 512;
constexpr uint64_t kDevBits = 13, kPosBits = 48;

// A 64-bit mixer (splitmix64's finalizer): neighbouring offsets land in
// unrelated buckets.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t SequentialDetector::Key(Edge edge, uint32_t dev, uint64_t offset) {
  // edge (bits 61-62, never 0: no key is the empty slot's 0) | dev (48-60) |
  // sector (0-47).
  return (static_cast<uint64_t>(edge) << (kDevBits + kPosBits)) |
         ((static_cast<uint64_t>(dev) & ((1ull << kDevBits) - 1)) << kPosBits) |
         ((offset / kSector) & ((1ull << kPosBits) - 1));
}

unsigned SequentialDetector::BucketOf(uint64_t key) {
  return static_cast<unsigned>(Mix(key) & (kBuckets - 1));
}

unsigned SequentialDetector::BucketOfEnd(uint32_t dev, uint64_t offset) {
  return BucketOf(Key(kEnd, dev, offset));
}

unsigned SequentialDetector::BucketOfStart(uint32_t dev, uint64_t offset) {
  return BucketOf(Key(kStart, dev, offset));
}

SequentialDetector::Record SequentialDetector::Take(uint64_t key, uint64_t now_ns, uint64_t max_age_ns) {
  Slot* bucket = &slots_[BucketOf(key) * kWays];
  for (unsigned w = 0; w < kWays; w++) {
    Slot& s = bucket[w];
    uint64_t k = key;
    if (s.key.load(std::memory_order_relaxed) != key) continue;
    // Held by another thread meanwhile: as if absent (nothing waits).
    if (!s.key.compare_exchange_strong(k, key | kBusy, std::memory_order_acquire)) return {};
    Record r{s.run.load(std::memory_order_relaxed), s.sync_ns.load(std::memory_order_relaxed)};
    const uint64_t expires = s.expires.load(std::memory_order_relaxed);
    const uint64_t put_ns = expires - kExpiryNanos;
    if (now_ns > put_ns && now_ns - put_ns >= max_age_ns && now_ns < expires) {
      s.key.store(key, std::memory_order_release);  // too old for this join: left as it was
      return {};
    }
    s.key.store(0, std::memory_order_release);
    return now_ns < expires ? r : Record{};
  }
  return {};
}

void SequentialDetector::Put(uint64_t key, Record r, uint64_t now_ns) {
  Slot* bucket = &slots_[BucketOf(key) * kWays];
  // One attempt per slot at most: each failed claim means another thread
  // changed that slot, so the bucket is scanned again without it.
  for (unsigned attempt = 0; attempt < kWays; attempt++) {
    Slot* victim = nullptr;
    uint64_t victim_key = 0, victim_expires = UINT64_MAX;
    for (unsigned w = 0; w < kWays; w++) {
      Slot& s = bucket[w];
      uint64_t k = s.key.load(std::memory_order_relaxed);
      if (k & kBusy) continue;
      if (k == key) {  // the same edge again: replace it
        victim = &s, victim_key = k;
        break;
      }
      // Empty slots first, then the record that expires first (expired or
      // least recently used).
      uint64_t expires = k == 0 ? 0 : s.expires.load(std::memory_order_relaxed);
      if (expires < victim_expires) victim = &s, victim_key = k, victim_expires = expires;
    }
    if (!victim) return;  // every slot held by other threads: not kept
    if (!victim->key.compare_exchange_strong(victim_key, kBusy, std::memory_order_acquire)) continue;
    victim->run.store(r.run, std::memory_order_relaxed);
    victim->sync_ns.store(r.sync_ns, std::memory_order_relaxed);
    victim->expires.store(now_ns + kExpiryNanos, std::memory_order_relaxed);
    victim->key.store(key, std::memory_order_release);
    return;
  }
}

uint64_t SequentialDetector::Observe(uint32_t dev, uint64_t offset, uint64_t len, uint64_t now_ns,
                                     bool* sync) {
  // Not tracked: a stream of its own, with only its own hint.
  if (len == 0 || offset % kSector != 0 || len % kSector != 0) return len;
  // The stream this I/O continues (it ended at offset) and the one it
  // precedes (it starts at offset + len) are taken out, merged with it and
  // put back. Past them, pieces of one stream that two threads split by
  // racing on an edge (see the header) join again, a few per I/O; each
  // joined edge's own record is removed with it.
  uint64_t start = offset, end = offset + len;
  uint64_t sync_ns = sync && *sync ? now_ns : 0;
  // Only the first is bcache's continuation, at any age within the expiry;
  // every other join is of pieces that came out of order, so within
  // kReorderNanos of each other — random I/O that fills a region in some
  // order over seconds is not a stream.
  for (unsigned i = 0; i < kMaxJoins; i++) {
    Record r = Take(Key(kEnd, dev, start), now_ns, i == 0 ? kExpiryNanos : kReorderNanos);
    if (r.run == 0 || r.run > start) break;  // (a record never reaches below 0)
    if (i > 0) Take(Key(kStart, dev, start), now_ns);
    start -= r.run;
    sync_ns = std::max(sync_ns, r.sync_ns);
  }
  for (unsigned i = 0; i < kMaxJoins; i++) {
    Record r = Take(Key(kStart, dev, end), now_ns, kReorderNanos);
    if (r.run == 0) break;
    if (i > 0) Take(Key(kEnd, dev, end), now_ns);
    end += r.run;
    sync_ns = std::max(sync_ns, r.sync_ns);
  }
  const Record merged{end - start, sync_ns};
  Put(Key(kStart, dev, start), merged, now_ns);
  Put(Key(kEnd, dev, end), merged, now_ns);
  // Clocks read on other threads just before may be a little behind.
  if (sync) *sync = sync_ns != 0 && (now_ns < sync_ns || now_ns - sync_ns < kSyncWindowNanos);
  return merged.run;
}

}  // namespace ubcache
