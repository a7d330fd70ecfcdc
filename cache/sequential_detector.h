// SPDX-License-Identifier: Apache-2.0
// SequentialDetector: bcache's stream detection (request.c,
// check_should_bypass), without a lock. A stream is a contiguous range seen
// within the last 5 s; an I/O that starts where a stream ended continues it
// and adds its length to the stream's run. Unlike bcache, an I/O that ends
// where a stream starts joins it too, and one that fills the gap between
// two streams joins them: a client with several connections (or several
// queues) delivers one stream's requests out of order, on several reactors,
// and exact continuation alone would see only fragments of it — but only
// pieces touched within 10 ms of each other (kReorderNanos): reordering
// spans no more, and random I/O that fills a region in some order over
// seconds is not a stream. A gap never joins. The caller compares the run
// with the (possibly congestion-shrunk) cutoff.
//
// How: a hashed table of edge records, each in a slot of its own. A stream
// [start, end) has two: one keyed by (device, end) and one keyed by
// (device, start), both holding the run (end - start), the time it expires
// and the time of its last sync write. An I/O takes (removes) the end record at its offset and the
// start record at its end, if fresh, and puts the merged stream's two
// records back — so a stream spread over several connections is one
// stream whichever reactor sees which piece, with no per-device lock: only
// two requests touching the same edge at the same instant meet, at that
// slot.
//
// A slot is claimed by one compare-and-swap of its key word (to the key
// with kBusy set), its run and expiry written or read, and the key stored
// again (release). Nothing waits: a slot some other thread holds counts as
// absent (the I/O starts a run of its own, or its record is not kept), so
// two requests racing on one edge may split a stream in two whose runs each
// go on growing; the next I/O at either end joins them again (up to
// kMaxJoins pieces on each side), and the cutoff is crossed a little later,
// never sooner.
// A full bucket (kWays slots) gives way in least-recently-used order (the
// record that expires first); expired records are reused first. The table
// holds kBuckets × kWays records, two per stream: sixteen times bcache's
// 128 recent streams (kRecent), so with that many a bucket overflows only
// by a rare pile-up of hashes.
//
// Offsets and lengths that are not multiples of 512 are not tracked (each
// such I/O is a run of its own length); devices are told apart by their
// index modulo 8192.
//
// Thread safety: any thread, lock-free (wait-free: a bounded number of
// compare-and-swaps per call, none retried on the same slot).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace ubcache {

class SequentialDetector {
 public:
  static constexpr unsigned kWays = 8;       // slots per bucket
  static constexpr unsigned kBuckets = 512;  // a power of two
  static constexpr unsigned kRecent = 128;   // bcache's recent streams
  static constexpr unsigned kMaxJoins = 4;   // adjacent pieces joined per side
  static constexpr uint64_t kExpiryNanos = 5'000'000'000ull;
  // Pieces of a stream that arrive out of order (several connections) do
  // so within this of each other: only then does an I/O join a stream it
  // precedes, or two pieces join.
  static constexpr uint64_t kReorderNanos = 10'000'000ull;

  // A stream's sync mark lasts this long after its last sync I/O.
  static constexpr uint64_t kSyncWindowNanos = 500'000'000ull;

  // Records an I/O of `len` bytes at `offset` on device `dev` at time
  // `now_ns`; returns the length of the run it belongs to, itself included.
  // `sync`, when given: in, whether this I/O is a sync write (FUA, after a
  // FLUSH); out, whether its stream had one within kSyncWindowNanos, this
  // one included — a journal's log blocks carry no hint, but its commit
  // records, in the same stream, do.
  uint64_t Observe(uint32_t dev, uint64_t offset, uint64_t len, uint64_t now_ns, bool* sync = nullptr);

  // The buckets that the records of a stream ending / starting at `offset`
  // of `dev` go to (the tests build full buckets with them).
  static unsigned BucketOfEnd(uint32_t dev, uint64_t offset);
  static unsigned BucketOfStart(uint32_t dev, uint64_t offset);

 private:
  enum Edge : uint64_t { kEnd = 1, kStart = 2 };
  static constexpr uint64_t kBusy = 1ull << 63;  // claimed by a thread; 0: empty
  struct Slot {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> run{0};      // bytes
    std::atomic<uint64_t> expires{0};  // ns; the record is fresh while now < expires
    std::atomic<uint64_t> sync_ns{0};  // the stream's last sync I/O; 0: none
  };
  struct Record {
    uint64_t run = 0;  // 0: none
    uint64_t sync_ns = 0;
  };
  static uint64_t Key(Edge edge, uint32_t dev, uint64_t offset);
  static unsigned BucketOf(uint64_t key);
  // Removes the record `key` and returns it; run 0 when it is absent, stale
  // or held by another thread. A fresh record put `max_age_ns` or longer
  // ago is left where it is, and run 0 returned.
  Record Take(uint64_t key, uint64_t now_ns, uint64_t max_age_ns = kExpiryNanos);
  // Records `key` with `r`, fresh for kExpiryNanos: over a record of the
  // same key, else in an empty slot, else over the bucket's record that
  // expires first. Gives up (the record is not kept) when other threads
  // hold the slots it tries.
  void Put(uint64_t key, Record r, uint64_t now_ns);

  static_assert(kRecent * 2 <= kBuckets * kWays);
  static_assert((kBuckets & (kBuckets - 1)) == 0);
  std::array<Slot, kBuckets * kWays> slots_{};
};

}  // namespace ubcache
