// SPDX-License-Identifier: Apache-2.0
// ExtentRuns: a resident leaf's extents, in key order, held in runs of at
// most kRunMax extents.
//
// Why runs: a 64 KiB leaf holds up to ~2500 extents (26 bytes each on disk,
// 48 in memory). As one vector, inserting a block written for the first
// time shifted half of it — ~60 KiB of memmove, the largest single cost of
// a writeback write's index update (issue 29's profile: 8.6 % of the
// daemon's CPU at 4 KiB random writes). In runs an insert or an erase
// shifts one run (a few KiB); finding a position is a binary search over
// the runs' last keys, then one within the run. The node's on-disk format
// is unchanged: a leaf is encoded from its runs in order.
//
// Invariants: no run is empty; the extents of all runs, in order, are in
// strictly increasing key order; each run's `last` is its last extent's key
// (kept beside the run so the search over runs reads one array, not each
// run's memory); size_ is their total.
//
// Not thread-safe (ExtentTree's callers hold the shard lock).
#pragma once

#include <cstddef>
#include <vector>

#include "btree/extent.h"

namespace ubcache {

class ExtentRuns {
 public:
  // A run past this splits in two halves. Small enough that a shift stays
  // within a few KiB, large enough that a full leaf has ~10-20 runs.
  static constexpr size_t kRunMax = 256;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Extent& operator[](size_t i) const;
  const Extent& front() const { return runs_.front().ext.front(); }
  const Extent& back() const { return runs_.back().ext.back(); }
  // Replaces the extent at pos with e, which has the same key.
  void Set(size_t pos, const Extent& e);

  // The position of the first extent whose key is not less than k (size()
  // when there is none).
  size_t LowerBound(ExtentKey k) const;
  // Inserts e before position pos (pos == size() appends); e's key must fit
  // the order there.
  void Insert(size_t pos, const Extent& e);
  void Erase(size_t pos);
  // Moves the extents from position pos on to the end of *to, in order
  // (a split: *to is the new right sibling).
  void MoveTailTo(size_t pos, ExtentRuns* to);
  // Moves all of *from to the end of this (a merge: every key of *from is
  // above every key here); *from is left empty.
  void Append(ExtentRuns* from);
  // Replaces the contents with v (in key order).
  void Assign(std::vector<Extent>&& v);
  // The extents in order, into *out (replacing its contents).
  void CopyTo(std::vector<Extent>* out) const;
  // Bytes held, for the node cache's budget.
  size_t bytes() const;

 private:
  // The run holding position i, and i's offset in it (i < size_).
  void Locate(size_t i, size_t* run, size_t* off) const;
  void Clear();

  struct Run {
    std::vector<Extent> ext;
    ExtentKey last;
  };
  static Run MakeRun(std::vector<Extent>&& ext);

  std::vector<Run> runs_;
  size_t size_ = 0;
};

}  // namespace ubcache
