// SPDX-License-Identifier: Apache-2.0
#include "cache/knobs.h"

namespace ubcache {

const char* CacheModeName(CacheMode m) {
  switch (m) {
    case CacheMode::kWritethrough: return "writethrough";
    case CacheMode::kWriteback: return "writeback";
    case CacheMode::kWritearound: return "writearound";
    case CacheMode::kNone: return "none";
  }
  return "?";
}

Result<CacheMode> ParseCacheMode(std::string_view s) {
  for (CacheMode m : {CacheMode::kWritethrough, CacheMode::kWriteback, CacheMode::kWritearound,
                      CacheMode::kNone})
    if (s == CacheModeName(m)) return m;
  return Status::InvalidArgument("cache_mode: '" + std::string(s) +
                                 "' (writethrough, writeback, writearound, none)");
}

const char* ReplacementPolicyName(ReplacementPolicy p) {
  switch (p) {
    case ReplacementPolicy::kLru: return "lru";
    case ReplacementPolicy::kFifo: return "fifo";
    case ReplacementPolicy::kRandom: return "random";
  }
  return "?";
}

Result<ReplacementPolicy> ParseReplacementPolicy(std::string_view s) {
  for (ReplacementPolicy p : {ReplacementPolicy::kLru, ReplacementPolicy::kFifo, ReplacementPolicy::kRandom})
    if (s == ReplacementPolicyName(p)) return p;
  return Status::InvalidArgument("cache_replacement_policy: '" + std::string(s) +
                                 "' (lru, fifo, random)");
}

const char* WritebackOrderName(WritebackOrder o) {
  switch (o) {
    case WritebackOrder::kFlush: return "flush";
    case WritebackOrder::kLba: return "lba";
  }
  return "?";
}

Result<WritebackOrder> ParseWritebackOrder(std::string_view s) {
  for (WritebackOrder o : {WritebackOrder::kFlush, WritebackOrder::kLba})
    if (s == WritebackOrderName(o)) return o;
  return Status::InvalidArgument("writeback_order: '" + std::string(s) + "' (flush, lba)");
}

}  // namespace ubcache
