// SPDX-License-Identifier: Apache-2.0
// CacheKnobs: the tunables of a cached device and of its cache set, with
// bcache's names and defaults (Documentation/admin-guide/bcache.rst), so a
// bcache user finds the same knobs. Every field is atomic: the control
// socket (or a serve flag) sets it, and the next request sees it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/status.h"

namespace ubcache {

enum class CacheMode : uint8_t { kWritethrough = 0, kWriteback = 1, kWritearound = 2, kNone = 3 };
enum class ReplacementPolicy : uint8_t { kLru = 0, kFifo = 1, kRandom = 2 };
// The order dirty data reaches the backing device (doc/design.md
// "Durability", rules 11-14). kFlush: epoch by epoch, the client's FLUSH and
// FUA requests the boundaries, so the backing device always holds a state a
// power cut could have left. kLba: bcache's, sorted by address: the fastest
// drain, no such promise. The numbers are the backing superblock's byte
// (doc/format.md §3).
enum class WritebackOrder : uint8_t { kFlush = 0, kLba = 1 };

const char* CacheModeName(CacheMode m);
Result<CacheMode> ParseCacheMode(std::string_view s);
const char* ReplacementPolicyName(ReplacementPolicy p);
Result<ReplacementPolicy> ParseReplacementPolicy(std::string_view s);
const char* WritebackOrderName(WritebackOrder o);
Result<WritebackOrder> ParseWritebackOrder(std::string_view s);

// "auto" for sequential_cutoff and the congested thresholds: the adaptive
// rules of cache/admission.h instead of bcache's fixed numbers.
inline constexpr uint64_t kAutoCutoff = UINT64_MAX;
inline constexpr uint32_t kAutoThresholdUs = UINT32_MAX;
// bcache's fixed defaults, which `serve --policy bcache` restores.
inline constexpr uint64_t kBcacheSequentialCutoff = 4u << 20;
inline constexpr uint32_t kBcacheCongestedReadUs = 2000;
inline constexpr uint32_t kBcacheCongestedWriteUs = 20000;

struct CacheKnobs {
  std::atomic<CacheMode> cache_mode{CacheMode::kWritethrough};
  // Shipped as "auto"; a fixed value keeps bcache's meaning.
  std::atomic<uint64_t> sequential_cutoff{kAutoCutoff};                // bytes; 0 disables
  std::atomic<uint32_t> congested_read_threshold_us{kAutoThresholdUs};   // 0 disables
  std::atomic<uint32_t> congested_write_threshold_us{kAutoThresholdUs};  // 0 disables
  std::atomic<ReplacementPolicy> replacement{ReplacementPolicy::kLru};
  std::atomic<uint32_t> writeback_percent{10};
  std::atomic<uint32_t> writeback_delay{30};
  std::atomic<bool> writeback_running{true};
  // Persisted with cache_mode in the backing superblock (ctl set, serve --set).
  std::atomic<WritebackOrder> writeback_order{WritebackOrder::kFlush};
  // writeback_order flush: the rate controller keeps the oldest epoch not
  // yet on the backing device about this young (seconds; 0: no target) by
  // lowering its dirty-data target; past twice this, full speed.
  std::atomic<uint32_t> writeback_lag_target{30};
  // writeback_order flush, a cache full of dirty epochs: true suspends the
  // order (the backing superblock promises no time until the epochs are
  // written back) once a write it turned away has waited a second for room,
  // rather than wait for all of them; false: it waits (cache/ordered_gate.h,
  // rule 17).
  std::atomic<bool> writeback_order_suspend{true};
  // The writeback rate controller's (bcache's PI controller) knobs; bcache
  // keeps rates in 512-byte sectors, these are bytes: 1024 and 8 sectors/s.
  std::atomic<uint64_t> writeback_rate{512 << 10};        // bytes/s
  std::atomic<uint32_t> writeback_rate_update_seconds{5};
  std::atomic<uint32_t> writeback_rate_p_term_inverse{40};
  std::atomic<uint32_t> writeback_rate_i_term_inverse{10000};
  std::atomic<uint64_t> writeback_rate_minimum{4096};     // bytes/s
  std::atomic<uint32_t> cutoff_writeback{40};
  std::atomic<uint32_t> cutoff_writeback_sync{70};
  // bcache's io_error_limit: cache-device I/O errors after which the cache
  // is failed (CacheSet::CountIoError); 0 never fails it.
  std::atomic<uint32_t> io_error_limit{8};
  // bcache's journal_delay_ms: index changes not forced by a FLUSH or a FUA
  // write are committed within this long.
  std::atomic<uint32_t> journal_delay_ms{100};
  // Memory for decoded index nodes; the set applies it to its ExtentIndex.
  std::atomic<uint64_t> btree_cache_size{64 << 20};

  // bcache's fixed sequential_cutoff and congested thresholds, all at once.
  void UseBcachePolicy() {
    sequential_cutoff = kBcacheSequentialCutoff;
    congested_read_threshold_us = kBcacheCongestedReadUs;
    congested_write_threshold_us = kBcacheCongestedWriteUs;
  }
};

// The bcache-score threshold a knob value stands for: "auto" has none (0).
inline uint32_t FixedThresholdUs(uint32_t knob) { return knob == kAutoThresholdUs ? 0 : knob; }

}  // namespace ubcache
