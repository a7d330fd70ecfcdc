// SPDX-License-Identifier: Apache-2.0
#include "backend/spindle_model.h"

#include <cmath>

namespace ubcache {

namespace {
// E[sqrt(|U1 - U2|)] for independent uniform U1, U2 on [0, 1]: the mean of
// sqrt(distance) over random seeks, so that avg_seek_ms is the true average.
constexpr double kMeanSqrtDistance = 8.0 / 15.0;
}  // namespace

SpindleModel::SpindleModel(SpindleParams p, uint64_t device_size)
    : p_(p), size_(device_size ? device_size : 1), rng_(p.seed) {}

uint64_t SpindleModel::NextRandom() {
  uint64_t z = (rng_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t SpindleModel::SeekNanos(uint64_t from, uint64_t to) const {
  if (from == to) return 0;
  double d = static_cast<double>(from > to ? from - to : to - from) / static_cast<double>(size_);
  if (d > 1) d = 1;
  double ms = p_.avg_seek_ms * (kSettleShare + (1 - kSettleShare) * std::sqrt(d) / kMeanSqrtDistance);
  return static_cast<uint64_t>(ms * 1e6);
}

uint64_t SpindleModel::TransferNanos(uint64_t len) const {
  return static_cast<uint64_t>(static_cast<double>(len) / (p_.mbps * 1e6) * 1e9);
}

uint64_t SpindleModel::RevolutionNanos() const { return static_cast<uint64_t>(60e9 / p_.rpm); }

uint64_t SpindleModel::Service(uint64_t offset, uint64_t len) {
  uint64_t t = TransferNanos(len);
  if (offset != head_) {
    t += SeekNanos(head_, offset);
    t += NextRandom() % RevolutionNanos();  // wait for the sector to come round
  }
  head_ = offset + len;
  return t;
}

}  // namespace ubcache
