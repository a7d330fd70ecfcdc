// SPDX-License-Identifier: Apache-2.0
// SpindleModel: service time of one request on a rotating disk, as DESIGN.md
// §7 describes it — seek (growing with the square root of the distance, as a
// fraction of the disk) + rotational delay (uniform over one revolution) +
// transfer (length / media rate). A request that starts where the previous
// one ended is a sequential follow-on: the head is already there, so it pays
// transfer time only.
//
// Pure and deterministic for a given seed and request sequence: the tests
// check computed times, not the wall clock. Not thread-safe; ModelDevice
// calls it under its own lock.
#pragma once

#include <cstdint>

namespace ubcache {

struct SpindleParams {
  double rpm = 10000;
  double avg_seek_ms = 3.5;  // average over uniformly random pairs of positions
  double mbps = 180;         // media rate, 10^6 bytes per second
  uint64_t seed = 1;
};

class SpindleModel {
 public:
  // Share of the average seek that is settle time, paid on any head move;
  // the rest grows with sqrt(distance).
  static constexpr double kSettleShare = 0.2;

  SpindleModel(SpindleParams p, uint64_t device_size);

  // Nanoseconds to serve a transfer of `len` bytes at `offset`; moves the head.
  uint64_t Service(uint64_t offset, uint64_t len);
  // Parts of the model, for tests and for documentation of the numbers.
  uint64_t SeekNanos(uint64_t from, uint64_t to) const;
  uint64_t TransferNanos(uint64_t len) const;
  uint64_t RevolutionNanos() const;
  uint64_t head() const { return head_; }
  const SpindleParams& params() const { return p_; }

 private:
  uint64_t NextRandom();  // splitmix64

  SpindleParams p_;
  uint64_t size_;
  uint64_t head_ = 0;
  uint64_t rng_;
};

}  // namespace ubcache
