// SPDX-License-Identifier: Apache-2.0
// ExtentRuns against a plain sorted vector: every operation the tree uses,
// in random sequences long enough to split, join and empty runs.
#include "btree/extent_runs.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>

using namespace ubcache;

namespace {

Extent At(uint64_t block) {
  Extent e;
  e.dev = static_cast<uint32_t>(block >> 40);
  e.start = (block & 0xffffffffff) * kIndexBlock;
  e.len = kIndexBlock;
  e.cache_offset = block * 7;
  return e;
}

size_t ModelLowerBound(const std::vector<Extent>& v, ExtentKey k) {
  return static_cast<size_t>(
      std::lower_bound(v.begin(), v.end(), k, [](const Extent& e, ExtentKey key) { return KeyOf(e) < key; }) -
      v.begin());
}

void RequireSame(const ExtentRuns& runs, const std::vector<Extent>& model) {
  REQUIRE(runs.size() == model.size());
  REQUIRE(runs.empty() == model.empty());
  std::vector<Extent> flat;
  runs.CopyTo(&flat);
  REQUIRE(flat == model);
  for (size_t i = 0; i < model.size(); i += 37) REQUIRE(runs[i] == model[i]);
  if (!model.empty()) {
    REQUIRE(runs.front() == model.front());
    REQUIRE(runs.back() == model.back());
  }
}

}  // namespace

TEST_CASE("ExtentRuns: random inserts, erases and updates match a sorted vector", "[btree][runs]") {
  std::mt19937_64 rng(GENERATE(1, 2, 3));
  ExtentRuns runs;
  std::vector<Extent> model;
  // Blocks from a small space, so inserts and erases meet the same keys.
  std::uniform_int_distribution<uint64_t> block(0, 6000);
  for (int step = 0; step < 20000; step++) {
    uint64_t b = block(rng);
    if (step % 1000 == 999) b |= uint64_t{1} << 40;  // a second device sorts after the first
    Extent e = At(b);
    size_t pos = runs.LowerBound(KeyOf(e));
    REQUIRE(pos == ModelLowerBound(model, KeyOf(e)));
    bool present = pos < model.size() && KeyOf(model[pos]) == KeyOf(e);
    // Grow for the first half, then shrink: runs split, then join and empty.
    bool grow = step < 10000 ? rng() % 4 != 0 : rng() % 4 == 0;
    if (!present && grow) {
      runs.Insert(pos, e);
      model.insert(model.begin() + static_cast<ptrdiff_t>(pos), e);
    } else if (present && !grow) {
      runs.Erase(pos);
      model.erase(model.begin() + static_cast<ptrdiff_t>(pos));
    } else if (present) {
      e.cache_offset += 1;  // an in-place update, as Replace's overwrite does
      runs.Set(pos, e);
      model[pos] = e;
    }
    if (step % 997 == 0) RequireSame(runs, model);
  }
  RequireSame(runs, model);
  // Emptied from every position, it is empty and usable again.
  while (!model.empty()) {
    size_t pos = rng() % model.size();
    runs.Erase(pos);
    model.erase(model.begin() + static_cast<ptrdiff_t>(pos));
  }
  RequireSame(runs, model);
  REQUIRE(runs.LowerBound({0, 0}) == 0);
  runs.Insert(0, At(5));
  model.push_back(At(5));
  RequireSame(runs, model);
}

TEST_CASE("ExtentRuns: a split and a merge keep every extent in order", "[btree][runs]") {
  std::vector<Extent> all;
  for (uint64_t b = 0; b < 2500; b++) all.push_back(At(b * 2));
  for (size_t mid : {size_t{0}, size_t{1}, size_t{100}, ExtentRuns::kRunMax * 3 / 4, size_t{1250}, size_t{2499},
                     size_t{2500}}) {
    CAPTURE(mid);
    ExtentRuns left;
    left.Assign(std::vector<Extent>(all));
    RequireSame(left, all);
    ExtentRuns right;
    left.MoveTailTo(mid, &right);
    RequireSame(left, std::vector<Extent>(all.begin(), all.begin() + static_cast<ptrdiff_t>(mid)));
    RequireSame(right, std::vector<Extent>(all.begin() + static_cast<ptrdiff_t>(mid), all.end()));
    // Both halves stay usable: an insert between existing keys on each side.
    std::vector<Extent> lm(all.begin(), all.begin() + static_cast<ptrdiff_t>(mid));
    std::vector<Extent> rm(all.begin() + static_cast<ptrdiff_t>(mid), all.end());
    if (!lm.empty()) {
      Extent e = At(lm.back().start / kIndexBlock + 1);  // blocks are even: +1 is free
      size_t p = left.LowerBound(KeyOf(e));
      REQUIRE(p == lm.size());
      left.Insert(p, e);
      lm.insert(lm.begin() + static_cast<ptrdiff_t>(p), e);
    }
    if (!rm.empty()) {
      Extent e = At(rm.front().start / kIndexBlock + 1);
      size_t p = right.LowerBound(KeyOf(e));
      REQUIRE(p == 1);
      right.Insert(p, e);
      rm.insert(rm.begin() + 1, e);
    }
    left.Append(&right);
    REQUIRE(right.empty());
    lm.insert(lm.end(), rm.begin(), rm.end());
    RequireSame(left, lm);
    REQUIRE(std::is_sorted(lm.begin(), lm.end(), [](const Extent& a, const Extent& b) { return KeyOf(a) < KeyOf(b); }));
  }
}

TEST_CASE("ExtentRuns: a leaf filled in random order holds its extents within about twice their size",
          "[btree][runs]") {
  // A leaf the size of a 64 KiB node's (the node cache charges bytes()).
  ExtentRuns runs;
  std::vector<uint64_t> order(2500);
  for (size_t i = 0; i < order.size(); i++) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  for (uint64_t b : order) {
    Extent e = At(b);
    runs.Insert(runs.LowerBound(KeyOf(e)), e);
  }
  REQUIRE(runs.size() == 2500);
  // Runs split in halves and never hold more than kRunMax + 1: at worst
  // about half empty.
  REQUIRE(runs.bytes() >= 2500 * sizeof(Extent));
  REQUIRE(runs.bytes() <= 2500 * sizeof(Extent) * 9 / 4);
  for (size_t i = 0; i < 2500; i++) REQUIRE(runs[i].start == i * kIndexBlock);
}
