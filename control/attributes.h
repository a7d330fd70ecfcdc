// SPDX-License-Identifier: Apache-2.0
// Attributes: the one table of everything `ubcache ctl` can show, get and
// set, and everything the metrics endpoint exports — knobs and statistics,
// named and grouped as bcache's sysfs names them (backing device, cache set,
// cache device, stats_total / stats_five_minute / stats_hour / stats_day,
// internal). `ctl show`, `get`, `set`, `metrics` and doc/control.md all
// derive from Attributes(); nothing else lists them, but for the one
// metric that is not an attribute, the request latency histogram (metrics.h
// says why).
//
// Reading an attribute takes no lock that the I/O path takes: knobs are
// atomics, statistics are folded from atomic counters (CacheStats) or summed
// from per-reactor shards (RequestStats), bucket usage and priority
// quantiles come from BucketAllocator's atomic histogram.
//
// Thread safety: the table is immutable after its first use (built once,
// thread-safely). Getters may run on any thread; setters change atomics and,
// for cache_mode, write backing superblocks with synchronous I/O on the
// calling thread's Reactor (the control thread's, never a client reactor's).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/backing_super.h"
#include "cache/bucket_allocator.h"
#include "cache/cache_set.h"
#include "cache/cached_device.h"
#include "cache/request_stats.h"
#include "cache/stats.h"
#include "util/status.h"

namespace ubcache::control {

enum class Group {
  kBackingDevice,
  kCacheSet,
  kCacheDevice,
  kStatsTotal,
  kStatsFiveMinute,
  kStatsHour,
  kStatsDay,
  kInternal,
};
inline constexpr Group kAllGroups[] = {Group::kBackingDevice, Group::kCacheSet,        Group::kCacheDevice,
                                       Group::kStatsTotal,    Group::kStatsFiveMinute, Group::kStatsHour,
                                       Group::kStatsDay,      Group::kInternal};
// "backing_device", "cache_set", "cache_device", "stats_total", ..., "internal":
// what `ctl stats GROUP` and `show` headers use.
const char* GroupName(Group g);
std::optional<Group> ParseGroup(std::string_view name);
// Attributes of a backing device (and its stats) carry the export's name.
bool PerDevice(Group g);

// One export of the daemon, as the attributes see it.
struct Target {
  std::string name;                 // the NBD export name
  CachedDevice* device = nullptr;
  CacheSet* set = nullptr;
  // This export's bcache backing superblock, or null when it is not formatted.
  BackingSuper* super = nullptr;
  // Every formatted backing device of the set: cache_mode is a knob of the
  // set here, so it persists into each of them.
  std::vector<BackingSuper*> set_supers;
  // ctl resize: grows the export to its backing device's size now (device
  // stack, cache, NBD, ublk device); the reply line, or why not. serve sets
  // it; null: the command is refused.
  std::function<Result<std::string>()> resize;
};

// One reading of a target: the statistics and priority stats are computed
// at most once however many attributes use them.
class Reading {
 public:
  explicit Reading(const Target& t);
  const Target& target() const { return t_; }
  const StatsGroup& stats(StatsWindow w);
  const BucketAllocator::PriorityStats& priority();
  // The export's request counts and latency histogram, summed once.
  const RequestStats::Totals& requests();

 private:
  const Target& t_;
  uint64_t now_ns_;
  std::array<std::optional<StatsGroup>, 4> stats_;
  std::optional<RequestStats::Totals> requests_;
  std::optional<BucketAllocator::PriorityStats> prio_;
};

struct Value {
  enum class Kind { kInt, kReal, kText, kList } kind = Kind::kInt;
  uint64_t i = 0;
  double r = 0;
  std::string text;
  std::vector<double> list;
  static Value Int(uint64_t v) { return {Kind::kInt, v, 0, {}, {}}; }
  static Value Real(double v) { return {Kind::kReal, 0, v, {}, {}}; }
  static Value Text(std::string v) { return {Kind::kText, 0, 0, std::move(v), {}}; }
  static Value List(std::vector<double> v) { return {Kind::kList, 0, 0, {}, std::move(v)}; }
  std::string ToString() const;  // what `get` prints
  std::string ToJson() const;
};

enum class MetricType { kNone, kGauge, kCounter };

struct Attribute {
  std::string name;  // as `get` takes it: "sequential_cutoff", "stats_total/cache_hits"
  Group group;
  std::string help;
  // Writable attributes: the valid values, as error messages and `show -v`
  // state them ("0..4294967295 bytes (4M style sizes accepted)",
  // "writethrough, writeback, writearound, none"). Empty: read-only.
  std::string range;
  std::string default_value;  // bcache's default, for writable attributes
  // Prometheus: ubcache_<metric>{device="…"[,labels]} value*scale. A text
  // value exports one sample per choice, labelled `<enum_label>="choice"`,
  // 1 for the current one; a list one per element, labelled quantile.
  std::string metric;
  MetricType type = MetricType::kNone;
  double scale = 1;
  std::string labels;                // extra labels, e.g. window="hour"
  std::string enum_label;            // text values: the label naming a choice
  std::vector<std::string> choices;  // text values: every possible value
  std::function<Value(Reading&)> get;
  std::function<Status(const Target&, std::string_view)> set;  // null: read-only
};

const std::vector<Attribute>& Attributes();
const Attribute* FindAttribute(std::string_view name);

// The table as Markdown, one row per attribute (doc/control.md embeds it;
// `ubcache ctl --list` prints it).
std::string AttributesMarkdown();

// Sets `name` on `t`: unknown names and invalid values are refused with the
// valid range, and nothing changes.
Status SetAttribute(const Target& t, std::string_view name, std::string_view value);

}  // namespace ubcache::control
