// SPDX-License-Identifier: Apache-2.0
#include "btree/extent_runs.h"

#include <algorithm>
#include <cassert>
#include <iterator>

namespace ubcache {

namespace {
bool KeyLess(const Extent& e, ExtentKey k) { return KeyOf(e) < k; }
}  // namespace

ExtentRuns::Run ExtentRuns::MakeRun(std::vector<Extent>&& ext) {
  assert(!ext.empty());
  Run r;
  r.last = KeyOf(ext.back());
  r.ext = std::move(ext);
  return r;
}

void ExtentRuns::Locate(size_t i, size_t* run, size_t* off) const {
  assert(i < size_);
  size_t r = 0;
  while (i >= runs_[r].ext.size()) i -= runs_[r++].ext.size();
  *run = r;
  *off = i;
}

const Extent& ExtentRuns::operator[](size_t i) const {
  size_t r, off;
  Locate(i, &r, &off);
  return runs_[r].ext[off];
}

void ExtentRuns::Set(size_t pos, const Extent& e) {
  size_t r, off;
  Locate(pos, &r, &off);
  assert(KeyOf(runs_[r].ext[off]) == KeyOf(e));
  runs_[r].ext[off] = e;
}

size_t ExtentRuns::LowerBound(ExtentKey k) const {
  // The first run whose last key is not below k holds the answer.
  auto run = std::lower_bound(runs_.begin(), runs_.end(), k,
                              [](const Run& r, ExtentKey key) { return r.last < key; });
  size_t pos = 0;
  for (auto it = runs_.begin(); it != run; ++it) pos += it->ext.size();
  if (run == runs_.end()) return pos;
  const std::vector<Extent>& v = run->ext;
  return pos + static_cast<size_t>(std::lower_bound(v.begin(), v.end(), k, KeyLess) - v.begin());
}

void ExtentRuns::Insert(size_t pos, const Extent& e) {
  assert(pos <= size_);
  if (runs_.empty()) runs_.push_back(Run{{}, KeyOf(e)});
  size_t r, off;
  if (pos == size_) {
    r = runs_.size() - 1;
    off = runs_[r].ext.size();
  } else {
    Locate(pos, &r, &off);
  }
  Run& run = runs_[r];
  std::vector<Extent>& v = run.ext;
  // A run grows to kRunMax + 1 extents at most (then splits): capacity
  // beyond that would be held, empty, by both halves.
  if (v.size() == v.capacity()) v.reserve(std::min(std::max<size_t>(2 * v.size(), 16), kRunMax + 1));
  v.insert(v.begin() + static_cast<ptrdiff_t>(off), e);
  if (off + 1 == v.size()) run.last = KeyOf(e);
  size_++;
  if (v.size() <= kRunMax) return;
  // Split in halves; the new run goes right after.
  size_t mid = v.size() / 2;
  std::vector<Extent> right;
  right.reserve(kRunMax + 1);
  right.assign(v.begin() + static_cast<ptrdiff_t>(mid), v.end());
  v.resize(mid);
  run.last = KeyOf(v.back());
  runs_.insert(runs_.begin() + static_cast<ptrdiff_t>(r) + 1, MakeRun(std::move(right)));
}

void ExtentRuns::Erase(size_t pos) {
  size_t r, off;
  Locate(pos, &r, &off);
  std::vector<Extent>& v = runs_[r].ext;
  v.erase(v.begin() + static_cast<ptrdiff_t>(off));
  size_--;
  if (v.empty()) {
    runs_.erase(runs_.begin() + static_cast<ptrdiff_t>(r));
    return;
  }
  if (off == v.size()) runs_[r].last = KeyOf(v.back());
  // A run that erases left small joins a neighbour that has room, so a leaf
  // emptied from the middle does not end as many tiny runs.
  if (v.size() >= kRunMax / 8) return;
  size_t left;
  if (r > 0 && runs_[r - 1].ext.size() + v.size() <= kRunMax)
    left = r - 1;
  else if (r + 1 < runs_.size() && v.size() + runs_[r + 1].ext.size() <= kRunMax)
    left = r;
  else
    return;
  Run& a = runs_[left];
  Run& b = runs_[left + 1];
  a.ext.insert(a.ext.end(), b.ext.begin(), b.ext.end());
  a.last = b.last;
  runs_.erase(runs_.begin() + static_cast<ptrdiff_t>(left) + 1);
}

void ExtentRuns::MoveTailTo(size_t pos, ExtentRuns* to) {
  assert(to->empty() && pos <= size_);
  if (pos == size_) return;
  size_t r, off;
  Locate(pos, &r, &off);
  size_t first_whole = r;
  if (off > 0) {
    std::vector<Extent>& v = runs_[r].ext;
    std::vector<Extent> tail;
    tail.reserve(kRunMax + 1);
    tail.assign(v.begin() + static_cast<ptrdiff_t>(off), v.end());
    to->runs_.push_back(MakeRun(std::move(tail)));
    v.resize(off);
    runs_[r].last = KeyOf(v.back());
    first_whole = r + 1;
  }
  to->runs_.insert(to->runs_.end(), std::make_move_iterator(runs_.begin() + static_cast<ptrdiff_t>(first_whole)),
                   std::make_move_iterator(runs_.end()));
  runs_.erase(runs_.begin() + static_cast<ptrdiff_t>(first_whole), runs_.end());
  to->size_ = size_ - pos;
  size_ = pos;
}

void ExtentRuns::Append(ExtentRuns* from) {
  assert(from != this);
  runs_.insert(runs_.end(), std::make_move_iterator(from->runs_.begin()),
               std::make_move_iterator(from->runs_.end()));
  size_ += from->size_;
  from->Clear();
}

void ExtentRuns::Assign(std::vector<Extent>&& v) {
  Clear();
  if (v.empty()) return;
  size_ = v.size();
  if (v.size() <= kRunMax) {
    runs_.push_back(MakeRun(std::move(v)));
    return;
  }
  // Runs three quarters full: room for inserts before the first split.
  const size_t step = kRunMax * 3 / 4;
  runs_.reserve((v.size() + step - 1) / step);
  for (size_t i = 0; i < v.size(); i += step) {
    size_t n = std::min(step, v.size() - i);
    std::vector<Extent> run;
    run.reserve(kRunMax + 1);
    run.assign(v.begin() + static_cast<ptrdiff_t>(i), v.begin() + static_cast<ptrdiff_t>(i + n));
    runs_.push_back(MakeRun(std::move(run)));
  }
}

void ExtentRuns::CopyTo(std::vector<Extent>* out) const {
  out->clear();
  out->reserve(size_);
  for (const Run& run : runs_) out->insert(out->end(), run.ext.begin(), run.ext.end());
}

size_t ExtentRuns::bytes() const {
  size_t b = runs_.capacity() * sizeof(Run);
  for (const Run& run : runs_) b += run.ext.capacity() * sizeof(Extent);
  return b;
}

void ExtentRuns::Clear() {
  runs_.clear();
  size_ = 0;
}

}  // namespace ubcache
