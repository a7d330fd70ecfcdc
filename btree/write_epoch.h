// SPDX-License-Identifier: Apache-2.0
// WriteEpoch: one backing device's write epochs, for writeback in `flush`
// order (cache/writeback_epochs.cpp, doc/design.md "Durability", rules 11-14).
//
// The client's writes to a device fall into epochs delimited by its FLUSH
// requests; a FUA write closes the epoch it belongs to. A dirty write takes
// the current epoch when its extent is inserted (ExtentIndex::Insert reads
// it under the shard lock, so two inserts into one range see epochs in
// insert order); a FLUSH closes the epoch when it arrives, a FUA write right
// after its insert. Why that is the client's order: a write acknowledged
// before a FLUSH arrived was inserted before it, so its epoch is at most
// the one the FLUSH closes; a write issued after the FLUSH's ack is
// inserted after the close, so its epoch is later. A write in flight beside
// a FLUSH may fall on either side, as the client cannot tell.
//
// The counter itself is not persisted: every start begins one past the
// newest epoch the index holds for the device (ExtentIndex::NewestEpoch),
// so no write after a restart joins an epoch a FLUSH closed before it.
// Splitting an epoch in two is always allowed (a finer order); joining two
// never is.
//
// Thread safety: lock-free; any thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "btree/node_format.h"

namespace ubcache {

class WriteEpoch {
 public:
  uint64_t current() const { return current_.load(std::memory_order_acquire); }
  // A FLUSH arrived, or a FUA write was inserted: later inserts are in the
  // next epoch. Saturates at kMaxEpoch (2^48 - 1: beyond any device's
  // lifetime of FLUSHes; it restarts low whenever a start finds it clean).
  void Close() {
    uint64_t cur = current_.load(std::memory_order_relaxed);
    while (cur < kMaxEpoch && !current_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) {
    }
  }
  // At start, before any write: past every epoch the index holds.
  void StartAfter(uint64_t newest) { current_.store(newest < kMaxEpoch ? newest + 1 : kMaxEpoch); }

 private:
  std::atomic<uint64_t> current_{1};
};

// How a dirty insert treats epochs (ExtentIndex::Insert).
struct EpochRule {
  const WriteEpoch* epoch = nullptr;  // the device's: the insert takes its current()
  // writeback_order flush: a dirty piece of an older epoch that the insert
  // replaces is kept (a kept version) until writeback has written its
  // epoch; lba: dropped, as before epochs.
  bool keep_older = false;
};

}  // namespace ubcache
