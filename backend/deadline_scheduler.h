// SPDX-License-Identifier: Apache-2.0
// DeadlineScheduler: the order in which a spindle sees the backing device's
// requests.
//
// A disk serves one request at a time and a random one costs a seek and a
// rotation (~6 ms), so the order of the queue decides who waits. Handed
// every request at once, the modelled spindle serves them in arrival order,
// as a disk driven at depth by many clients does: one random reader beside
// four writers that keep eight writes each in flight waits behind ~32
// writes per read (bench/run's fairness suite: the reader at 0.07× its
// solo rate). This layer holds requests back and gives the device at most
// `depth` at a time, chosen by these rules, in this order:
//
//   1. A write batch that has started continues (up to `write_batch`).
//   2. Reads before writes: a client waits on every read, while writes come
//      in bursts that a cache absorbs or a writer overlaps.
//   3. Anticipation: after a read completes with no read waiting, writes
//      are held for `anticipate_ns`. A synchronous reader sends its next
//      read within a client round trip (~0.2 ms here); a write dispatched
//      in that gap would cost it a whole seek and rotation.
//   4. Writes are slowed, never starved: while reads keep the disk busy,
//      the writes get a batch at least every `write_expire_ns`: a quarter
//      of the writes waiting, at least `write_batch` and at most
//      `max_write_batch`. A few writers beside a reader (fairness suite: 32
//      writes waiting) get 8 per turn; a deep backlog behind many readers
//      (dbench with 128 clients: hundreds) drains in proportion instead of
//      at 32 writes a second, which stalled ext4's journal for 30 s.
//   Within a class the next request is the nearest at or after the last
//   dispatched offset (a one-way elevator), so a deep queue costs short
//   seeks and follow-on requests are sequential; one waiting longer than
//   its class's expiry goes first.
//
// Flushes pass straight through: a flush covers writes already completed,
// and no held write has completed, so holding it back would only delay it.
// Reordering requests that are in flight together is what any device may do
// (BlockDevice promises no order between them).
//
// Completions run on the reactor that submitted, as BlockDevice promises. A
// request may be dispatched from another reactor's completion; it is then
// submitted to the device below on its own reactor (Post), never on the
// dispatching one, which may not run again for a long time (the writeback
// thread's, asleep between passes): its completion, and a spindle model's
// timer, would wait there. The request's own reactor waits for it, so runs.
//
// Thread safety: any reactor thread; one mutex guards the queues and the
// counters. The device below is submitted to outside the lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/block_device.h"

namespace ubcache {

class DeadlineScheduler final : public BlockDevice {
 public:
  struct Options {
    unsigned depth = 1;                      // requests at the device at once
    uint64_t anticipate_ns = 2'000'000;      // rule 3
    uint64_t write_expire_ns = 250'000'000;  // rule 4
    unsigned write_batch = 8;                // rules 1 and 4
    unsigned max_write_batch = 64;
    uint64_t read_expire_ns = 500'000'000;   // a read this old goes first
  };
  struct Stats {
    uint64_t reads = 0, writes = 0;  // dispatched to the device below
    uint64_t write_batches = 0;      // started by rule 4 while reads were busy
    uint64_t anticipation_waits = 0; // times writes were held for a read (rule 3)
    uint64_t queued = 0;             // held now
  };

  DeadlineScheduler(std::unique_ptr<BlockDevice> lower, Options opts);
  explicit DeadlineScheduler(std::unique_ptr<BlockDevice> lower)
      : DeadlineScheduler(std::move(lower), Options{}) {}
  ~DeadlineScheduler() override;

  std::string Describe() const override;
  bool rotational() const override;
  Result<uint64_t> Grow() override;
  Stats stats() const;
  const Options& options() const { return opts_; }

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override;
  void DoPrefetch(uint64_t offset, uint64_t len, IoDone done) override;

 private:
  // The queues and the device below. Shared: a completion or a wake-up
  // timer keeps it alive, so neither can outlive what it points at.
  struct State;
  Options opts_;
  std::shared_ptr<State> state_;
};

// Wraps `dev` in a DeadlineScheduler with default options when `mode` says
// so: "deadline" always, "none" never, "auto" when the device is rotational.
// Any other mode is an InvalidArgument naming it.
Result<std::unique_ptr<BlockDevice>> WithScheduler(std::unique_ptr<BlockDevice> dev,
                                                   std::string_view mode);

}  // namespace ubcache
