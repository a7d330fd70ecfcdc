// SPDX-License-Identifier: Apache-2.0
// Writeback in `flush` order (writeback_order flush, the default): one pass
// writes back part or all of ONE epoch, the oldest the device still holds
// dirty data or kept versions of (doc/design.md "Durability", rule 13).
//
// Why that gives the promise ("every write of epoch k is on the backing
// device, and a backing flush has completed, before any write of a later
// epoch reaches it"): a pass's backing writes all complete, and the backing
// device is flushed (FlushAndMarkClean), before the pass marks anything
// clean or unkeeps it; the next pass asks again for the oldest epoch, which
// stays the same until every piece of it is clean (a write that failed, or
// was not claimed, keeps it oldest). So no write of epoch k + 1 is issued
// before epoch k's last write was flushed. Inside the epoch the order is
// the address order of the stripes, coalesced, as in `lba` order.
#include <algorithm>

#include "cache/cache_set.h"
#include "cache/writeback.h"
#include "cache/writeback_pass.h"
#include "util/clock.h"
#include "util/log.h"

namespace ubcache {

bool Writeback::CollectEpoch(PassState& s) {
  ExtentIndex& index = d_.set->index();
  std::optional<uint64_t> oldest = index.OldestEpoch(d_.dev);
  if (!oldest) return false;
  s.epoch = *oldest;
  std::vector<uint64_t> stripes = index.EpochStripes(d_.dev, s.epoch, kStripesPerPass);
  if (stripes.empty()) return false;
  std::vector<Extent> found;
  size_t claimed = 0, kept_seen = 0, tree_seen = 0;
  ClaimRuns(s, stripes, [&](const Run& r) {
    claimed++;
    uint64_t bytes = 0;
    const size_t first = s.pieces.size();
    // The tree's extents of this epoch: older ones are written back
    // already (this is the oldest), newer ones wait for their epoch.
    if (index.Lookup(d_.dev, r.start, r.end - r.start, &found).ok())
      for (const Extent& e : found)
        if (e.dirty && e.epoch == s.epoch) {
          tree_seen++;
          bytes += TakePiece(s, e, false);
        }
    // The epoch's kept versions in the run: their ranges hold newer data
    // in the tree, so the two lists never overlap.
    for (const Extent& k : index.KeptVersions(d_.dev, s.epoch, r.start, r.end)) {
      kept_seen++;
      bytes += TakePiece(s, k, true);
    }
    // Address order inside the run, so contiguous pieces coalesce.
    std::sort(s.pieces.begin() + static_cast<ptrdiff_t>(first), s.pieces.end(),
              [](const std::unique_ptr<Piece>& a, const std::unique_ptr<Piece>& b) { return a->e.start < b->e.start; });
    return bytes;
  });
  if (s.pieces.empty()) {
    // The oldest epoch has stripes but nothing of it was taken: writeback
    // cannot get past it this pass (rule 13). Said, at most every 10 s.
    uint64_t now = NowNanos();
    if (now - stuck_logged_ns_ >= 10'000'000'000) {
      stuck_logged_ns_ = now;
      UB_INFO("{}: writeback: oldest epoch {}: {} stripes (first {}), {} claimed, {} dirty extents and {} kept "
              "versions of it found there, none taken",
              d_.spec, s.epoch, stripes.size(), stripes.front(), claimed, tree_seen, kept_seen);
    }
  }
  return true;
}

}  // namespace ubcache
