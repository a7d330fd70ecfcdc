// SPDX-License-Identifier: Apache-2.0
#include "util/power_domain.h"

#include <fstream>
#include <random>
#include <string>

#include "util/thread_annotations.h"

namespace ubcache {
namespace {

Mutex mu;
bool by_process GUARDED_BY(mu) = false;
PowerDomain process_domain GUARDED_BY(mu){};

PowerDomain RandomDomain() {
  std::random_device rd;
  PowerDomain d;
  for (size_t i = 0; i < d.size(); i += 4) {
    uint32_t v = rd();
    for (size_t j = 0; j < 4; j++) d[i + j] = static_cast<uint8_t>(v >> (8 * j));
  }
  return d;
}

// The boot id's 32 hex digits as 16 bytes; false when it cannot be read.
bool ReadBootId(PowerDomain* d) {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string s;
  if (!(f >> s)) return false;
  size_t n = 0;
  int hi = -1;
  for (char c : s) {
    if (c == '-') continue;
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0 || n == d->size()) return false;
    if (hi < 0) {
      hi = v;
    } else {
      (*d)[n++] = static_cast<uint8_t>(hi << 4 | v);
      hi = -1;
    }
  }
  return n == d->size() && hi < 0;
}

}  // namespace

PowerDomain CurrentPowerDomain() {
  MutexLock l(&mu);
  if (!by_process) {
    static const std::pair<bool, PowerDomain> boot = [] {
      PowerDomain d{};
      bool ok = ReadBootId(&d);
      return std::make_pair(ok, d);
    }();
    if (boot.first) return boot.second;
    by_process = true;
    process_domain = RandomDomain();
  }
  return process_domain;
}

void PowerHeldByProcess() {
  MutexLock l(&mu);
  if (by_process) return;
  by_process = true;
  process_domain = RandomDomain();
}

void NewPowerDomain() {
  MutexLock l(&mu);
  by_process = true;
  process_domain = RandomDomain();
}

}  // namespace ubcache
