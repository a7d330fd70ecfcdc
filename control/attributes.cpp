// SPDX-License-Identifier: Apache-2.0
#include "control/attributes.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>

#include "cache/superblock.h"
#include "util/clock.h"
#include "util/size.h"

// The project's VERSION (top-level CMakeLists.txt), passed by
// control/CMakeLists.txt as tools/CMakeLists.txt passes it to `ubcache --version`.
#ifndef UBCACHE_VERSION
#error "UBCACHE_VERSION is not defined: control/CMakeLists.txt passes the project's VERSION"
#endif

namespace ubcache::control {

const char* GroupName(Group g) {
  switch (g) {
    case Group::kBackingDevice: return "backing_device";
    case Group::kCacheSet: return "cache_set";
    case Group::kCacheDevice: return "cache_device";
    case Group::kStatsTotal: return "stats_total";
    case Group::kStatsFiveMinute: return "stats_five_minute";
    case Group::kStatsHour: return "stats_hour";
    case Group::kStatsDay: return "stats_day";
    case Group::kInternal: return "internal";
  }
  return "?";
}

std::optional<Group> ParseGroup(std::string_view name) {
  for (Group g : kAllGroups)
    if (name == GroupName(g)) return g;
  return std::nullopt;
}

bool PerDevice(Group g) { return g != Group::kCacheSet && g != Group::kCacheDevice && g != Group::kInternal; }

Reading::Reading(const Target& t) : t_(t), now_ns_(NowNanos()) {}

const StatsGroup& Reading::stats(StatsWindow w) {
  auto& s = stats_[static_cast<int>(w)];
  if (!s) s = t_.device->stats().Snapshot(w, now_ns_);
  return *s;
}

const RequestStats::Totals& Reading::requests() {
  if (!requests_) requests_ = t_.device->requests().Read();
  return *requests_;
}

const BucketAllocator::PriorityStats& Reading::priority() {
  if (!prio_) prio_ = t_.set->buckets().priority_stats();
  return *prio_;
}

namespace {

// When this process started (wall clock, unix seconds): taken as the
// process starts, before main(), not when the table is first used.
const uint64_t kStartTimeSeconds = [] {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec);
}();

std::string FormatReal(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string Value::ToString() const {
  switch (kind) {
    case Kind::kInt: return std::to_string(i);
    case Kind::kReal: return FormatReal(r);
    case Kind::kText: return text;
    case Kind::kList: {
      std::string s = "[";
      for (size_t k = 0; k < list.size(); k++) s += (k ? " " : "") + FormatReal(list[k]);
      return s + "]";
    }
  }
  return "";
}

std::string Value::ToJson() const {
  switch (kind) {
    case Kind::kInt: return std::to_string(i);
    case Kind::kReal: return std::isfinite(r) ? FormatReal(r) : "null";
    case Kind::kText: return JsonString(text);
    case Kind::kList: {
      std::string s = "[";
      for (size_t k = 0; k < list.size(); k++) s += (k ? "," : "") + FormatReal(list[k]);
      return s + "]";
    }
  }
  return "null";
}

namespace {

std::string Range(uint64_t min, uint64_t max, const char* unit) {
  return std::to_string(min) + ".." + std::to_string(max) + (*unit ? " " : "") + unit;
}

Status Refuse(const std::string& name, std::string_view value, const std::string& range) {
  return Status::InvalidArgument(name + ": invalid value '" + std::string(value) + "' (valid: " +
                                 range + ")");
}

// A knob held in CacheKnobs as an atomic integer (or bool): `sizes` accepts
// "4M" style values.
template <typename T>
Attribute IntKnob(std::string name, Group g, std::string help, std::atomic<T> CacheKnobs::*field,
                  uint64_t min, uint64_t max, const char* unit, bool sizes, std::string metric,
                  double scale = 1) {
  Attribute a;
  a.name = std::move(name);
  a.group = g;
  a.help = std::move(help);
  a.range = Range(min, max, unit) + (sizes ? " (sizes like 4M accepted)" : "");
  a.default_value = std::to_string(static_cast<uint64_t>(CacheKnobs{}.*field));
  a.metric = std::move(metric);
  a.type = MetricType::kGauge;
  a.scale = scale;
  a.get = [field](Reading& r) {
    return Value::Int(static_cast<uint64_t>((r.target().set->knobs().*field).load()));
  };
  std::string n = a.name, range = a.range;
  a.set = [field, min, max, sizes, n, range](const Target& t, std::string_view v) -> Status {
    Result<uint64_t> parsed = sizes ? ParseSize(v) : ParseUint(v, 0, UINT64_MAX, n);
    if (!parsed.ok() || *parsed < min || *parsed > max) return Refuse(n, v, range);
    (t.set->knobs().*field).store(static_cast<T>(*parsed));
    return Status::OK();
  };
  return a;
}

// An IntKnob that also takes "auto" (stored as `auto_value`, shown as
// "auto"; NaN in metrics), its shipped default.
template <typename T>
Attribute AutoKnob(std::string name, Group g, std::string help, std::atomic<T> CacheKnobs::*field,
                   T auto_value, uint64_t max, const char* unit, bool sizes, std::string metric,
                   double scale = 1) {
  Attribute a = IntKnob(std::move(name), g, std::move(help), field, 0, max, unit, sizes, std::move(metric), scale);
  a.range = "auto, or " + a.range;
  a.default_value = "auto";
  a.get = [field, auto_value](Reading& r) {
    T v = (r.target().set->knobs().*field).load();
    return v == auto_value ? Value::Text("auto") : Value::Int(static_cast<uint64_t>(v));
  };
  auto set_fixed = a.set;
  a.set = [field, auto_value, set_fixed, n = a.name, range = a.range](const Target& t,
                                                                      std::string_view v) -> Status {
    if (v != "auto") {
      Status st = set_fixed(t, v);
      return st.IsInvalidArgument() ? Refuse(n, v, range) : st;
    }
    (t.set->knobs().*field).store(auto_value);
    return Status::OK();
  };
  return a;
}

Attribute Stat(std::string name, Group g, std::string help, std::string metric, MetricType type,
               std::function<Value(Reading&)> get) {
  Attribute a;
  a.name = std::move(name);
  a.group = g;
  a.help = std::move(help);
  a.metric = std::move(metric);
  a.type = type;
  a.get = std::move(get);
  return a;
}

Attribute EnumKnob(std::string name, Group g, std::string help, std::string metric,
                   std::string enum_label, std::vector<std::string> choices, std::string def,
                   std::function<Value(Reading&)> get,
                   std::function<Status(const Target&, std::string_view)> set) {
  Attribute a = Stat(std::move(name), g, std::move(help), std::move(metric), MetricType::kGauge, std::move(get));
  a.enum_label = std::move(enum_label);
  for (const auto& c : choices) a.range += (a.range.empty() ? "" : ", ") + c;
  a.choices = std::move(choices);
  a.default_value = std::move(def);
  std::string n = a.name, range = a.range;
  a.set = [set, n, range](const Target& t, std::string_view v) -> Status {
    Status st = set(t, v);
    return st.IsInvalidArgument() ? Refuse(n, v, range) : st;
  };
  return a;
}

// bcache's cache_mode lives in the backing superblock (flags bits 0-3): write
// every formatted backing device of the set first, so a failed write leaves
// the knob as it was.
Status SetCacheMode(const Target& t, std::string_view v) {
  Result<CacheMode> m = ParseCacheMode(v);
  if (!m.ok()) return m.status();
  for (BackingSuper* s : t.set_supers) {
    Status st = s->SetCacheMode(*m);
    if (!st.ok()) return Status::IoError("cache_mode: writing the backing superblock of " + s->device()->spec() + ": " + st.message());
  }
  t.set->knobs().cache_mode.store(*m);
  return Status::OK();
}

// writeback_order persists beside cache_mode (the backing superblock's pad
// byte 152), written the same way: every formatted backing device first.
Status SetWritebackOrder(const Target& t, std::string_view v) {
  Result<WritebackOrder> o = ParseWritebackOrder(v);
  if (!o.ok()) return o.status();
  for (BackingSuper* s : t.set_supers) {
    Status st = s->SetWritebackOrder(*o);
    if (!st.ok())
      return Status::IoError("writeback_order: writing the backing superblock of " + s->device()->spec() + ": " +
                             st.message());
  }
  t.set->knobs().writeback_order.store(*o);
  return Status::OK();
}

void AddStatsGroup(std::vector<Attribute>& table, Group g, StatsWindow w) {
  const std::string prefix = std::string(GroupName(g)) + "/";
  const bool total = w == StatsWindow::kTotal;
  // stats_total are counters (ubcache_cache_hits_total); the decayed
  // windows are gauges with a window label (ubcache_cache_hits_window).
  const MetricType type = total ? MetricType::kCounter : MetricType::kGauge;
  const std::string labels = total ? "" : std::string("window=\"") + StatsWindowName(w) + "\"";
  struct Field {
    const char* name;
    const char* help;
    const char* metric;
    double StatsGroup::*member;
  };
  static const Field kFields[] = {
      {"cache_hits", "reads served entirely from the cache", "cache_hits", &StatsGroup::cache_hits},
      {"cache_misses", "reads that needed the backing device", "cache_misses", &StatsGroup::cache_misses},
      {"cache_bypass_hits", "hits among reads that bypassed the cache", "cache_bypass_hits",
       &StatsGroup::cache_bypass_hits},
      {"cache_bypass_misses", "misses among reads that bypassed the cache", "cache_bypass_misses",
       &StatsGroup::cache_bypass_misses},
      {"cache_miss_collisions", "fills dropped because a write raced them", "cache_miss_collisions",
       &StatsGroup::cache_miss_collisions},
      {"cache_readaheads", "NBD_CMD_CACHE prefetch steps", "cache_readaheads", &StatsGroup::cache_readaheads},
      {"bypassed", "bytes of I/O that bypassed the cache", "bypassed_bytes", &StatsGroup::bypassed},
  };
  for (const Field& f : kFields) {
    Attribute a = Stat(prefix + f.name, g, f.help, std::string(f.metric) + (total ? "_total" : "_window"),
                       type, [w, m = f.member](Reading& r) { return Value::Real(r.stats(w).*m); });
    a.labels = labels;
    table.push_back(std::move(a));
  }
  Attribute ratio = Stat(prefix + "cache_hit_ratio", g, "hits as a percentage of hits + misses",
                         "cache_hit_ratio_percent", MetricType::kGauge,
                         [w](Reading& r) { return Value::Int(r.stats(w).hit_ratio()); });
  ratio.labels = labels.empty() ? "window=\"total\"" : labels;
  table.push_back(std::move(ratio));
}

// A device's measured service time (cache/service_time.h): its mean per
// operation and size class, in µs, as `<what>_read_us/4k` ...; metrics
// ubcache_<what>_service_time_seconds{op="read",size="4k"}.
void AddServiceTime(std::vector<Attribute>& table, Group g, const std::string& what,
                    std::function<const ServiceTime&(Reading&)> device) {
  for (ServiceTime::Op op : {ServiceTime::Op::kRead, ServiceTime::Op::kWrite}) {
    const char* op_name = op == ServiceTime::Op::kRead ? "read" : "write";
    for (int cls = 0; cls < ServiceTime::kClasses; cls++) {
      Attribute a = Stat(what + "_" + op_name + "_us/" + ServiceTime::ClassName(cls), g,
                         "mean " + std::string(op_name) + " service time of the " + what +
                             " device, requests up to this size class, µs (decayed; 0: no sample)",
                         what + "_service_time_seconds", MetricType::kGauge, [device, op, cls](Reading& r) {
                           return Value::Real(static_cast<double>(device(r).MeanNs(op, cls)) / 1000);
                         });
      a.scale = 1e-6;
      a.labels = std::string("op=\"") + op_name + "\",size=\"" + ServiceTime::ClassName(cls) + "\"";
      table.push_back(std::move(a));
    }
  }
}

// Every client request of the export, by operation (cache/request_stats.h),
// counted as it is answered: requests/read … as ubcache_requests_total{op=…},
// failed ones, and the bytes of reads and writes. Their latency histogram
// (ubcache_request_duration_seconds) is not an attribute: see
// AppendRequestHistogram in metrics.cpp.
void AddRequests(std::vector<Attribute>& table, Group g) {
  struct Counter {
    const char* prefix;  // requests/read …
    const char* help;
    const char* metric;
    uint64_t RequestStats::OpTotals::*member;
    bool data_only;  // reads and writes only
  };
  static const Counter kCounters[] = {
      {"requests/", "client requests of this operation answered since start, failed ones included "
                    "(cache: NBD_CMD_CACHE prefetches)", "requests_total", &RequestStats::OpTotals::requests, false},
      {"request_errors/", "client requests of this operation answered with an error since start",
       "request_errors_total", &RequestStats::OpTotals::errors, false},
      {"request_bytes/", "bytes of the successful client requests of this operation since start",
       "request_bytes_total", &RequestStats::OpTotals::bytes, true},
  };
  for (const Counter& c : kCounters) {
    for (int i = 0; i < RequestStats::kOps; i++) {
      const auto op = static_cast<RequestStats::Op>(i);
      if (c.data_only && op != RequestStats::kRead && op != RequestStats::kWrite) continue;
      Attribute a = Stat(c.prefix + std::string(RequestStats::OpName(op)), g, c.help, c.metric, MetricType::kCounter,
                         [op, m = c.member](Reading& r) { return Value::Int(r.requests()[op].*m); });
      a.labels = std::string("op=\"") + RequestStats::OpName(op) + "\"";
      table.push_back(std::move(a));
    }
  }
}

std::vector<Attribute> BuildTable() {
  std::vector<Attribute> t;
  constexpr uint64_t kUint = std::numeric_limits<uint32_t>::max();
  const Group bdev = Group::kBackingDevice, cset = Group::kCacheSet, cdev = Group::kCacheDevice;

  // ---- backing device (bcache: /sys/block/bcacheN/bcache/) ----
  t.push_back(EnumKnob(
      "cache_mode", bdev, "writethrough, writeback (with a formatted cache and backing device), writearound, none",
      "cache_mode", "mode", {"writethrough", "writeback", "writearound", "none"}, "writethrough",
      [](Reading& r) { return Value::Text(CacheModeName(r.target().set->knobs().cache_mode.load())); },
      SetCacheMode));
  t.push_back(EnumKnob(
      "writeback_order", bdev,
      "flush: dirty data reaches the backing device epoch by epoch (the client's FLUSH/FUA), so it always "
      "holds a state a power cut could have left; lba: address order, the fastest drain, no such promise",
      "writeback_order", "order", {"flush", "lba"}, "flush",
      [](Reading& r) { return Value::Text(WritebackOrderName(r.target().set->knobs().writeback_order.load())); },
      SetWritebackOrder));
  t.push_back(AutoKnob("sequential_cutoff", bdev,
                       "streams this long bypass the cache; 0 disables; auto: streams are cached while there "
                       "is space to spare or when read again",
                       &CacheKnobs::sequential_cutoff, kAutoCutoff, kUint, "bytes", true, "sequential_cutoff_bytes"));
  t.push_back(IntKnob("writeback_percent", bdev, "dirty data target, percent of the cache",
                      &CacheKnobs::writeback_percent, 0, 40, "percent", false, "writeback_percent"));
  t.push_back(IntKnob("writeback_delay", bdev, "seconds to sleep after a full writeback pass",
                      &CacheKnobs::writeback_delay, 0, kUint, "seconds", false, "writeback_delay_seconds"));
  t.push_back(IntKnob("writeback_lag_target", bdev,
                      "writeback_order flush: the rate controller keeps the oldest epoch not yet on the backing "
                      "device about this many seconds old, lowering its dirty target; past twice this, full "
                      "speed (0: no target)",
                      &CacheKnobs::writeback_lag_target, 0, kUint, "seconds", false, "writeback_lag_target_seconds"));
  t.push_back(IntKnob("writeback_order_suspend", bdev,
                      "writeback_order flush, the cache full of dirty epochs: 1 suspends the order (no consistent "
                      "time promised until those epochs are written back) once a write it turned away has waited "
                      "a second for room, rather than wait for all of them; 0 waits",
                      &CacheKnobs::writeback_order_suspend, 0, 1, "", false, "writeback_order_suspend"));
  t.push_back(IntKnob("writeback_running", bdev, "1 runs writeback, 0 pauses it", &CacheKnobs::writeback_running,
                      0, 1, "", false, "writeback_running"));
  t.push_back(IntKnob("writeback_rate", bdev, "writeback rate, bytes/s (the PI controller's output)",
                      &CacheKnobs::writeback_rate, 512, kUint * 512, "bytes/s", true,
                      "writeback_rate_bytes_per_second"));
  t.push_back(IntKnob("writeback_rate_update_seconds", bdev, "seconds between rate updates",
                      &CacheKnobs::writeback_rate_update_seconds, 1, 60, "seconds", false,
                      "writeback_rate_update_seconds"));
  t.push_back(IntKnob("writeback_rate_p_term_inverse", bdev, "proportional term divisor",
                      &CacheKnobs::writeback_rate_p_term_inverse, 1, kUint, "", false,
                      "writeback_rate_p_term_inverse"));
  t.push_back(IntKnob("writeback_rate_i_term_inverse", bdev, "integral term divisor",
                      &CacheKnobs::writeback_rate_i_term_inverse, 1, kUint, "", false,
                      "writeback_rate_i_term_inverse"));
  t.push_back(IntKnob("writeback_rate_minimum", bdev, "lowest writeback rate, bytes/s",
                      &CacheKnobs::writeback_rate_minimum, 512, kUint * 512, "bytes/s", true,
                      "writeback_rate_minimum_bytes_per_second"));
  t.push_back(Stat("dirty_data", bdev, "bytes in the cache not yet on the backing device",
                   "dirty_data_bytes", MetricType::kGauge,
                   [](Reading& r) { return Value::Int(r.target().device->dirty_bytes()); }));
  t.push_back(Stat("writeback_lag_seconds", bdev,
                   "age of the oldest write epoch not yet on the backing device (0: nothing dirty); in flush "
                   "order the backing device holds every write acknowledged before that long ago",
                   "writeback_lag_seconds", MetricType::kGauge, [](Reading& r) {
                     return Value::Real(static_cast<double>(r.target().device->writeback_lag_ms()) / 1000);
                   }));
  t.push_back(Stat("dirty_epochs", bdev,
                   "write epochs (between the client's FLUSH/FUA barriers) with data not yet on the backing device",
                   "dirty_epochs", MetricType::kGauge,
                   [](Reading& r) { return Value::Int(r.target().device->dirty_epochs()); }));
  t.push_back(Stat("writeback_written", bdev, "bytes written back to the backing device since start",
                   "writeback_written_bytes_total", MetricType::kCounter, [](Reading& r) {
                     Writeback* wb = r.target().device->writeback();
                     return Value::Int(wb ? wb->written_bytes() : 0);
                   }));
  t.push_back(Stat("writeback_errors", bdev, "failed writeback reads or writes (the data stays dirty and is retried)",
                   "writeback_errors_total", MetricType::kCounter, [](Reading& r) {
                     Writeback* wb = r.target().device->writeback();
                     return Value::Int(wb ? wb->errors() : 0);
                   }));
  t.push_back(Stat("sequential_bypasses", bdev, "requests sent around the cache because their run reached sequential_cutoff",
                   "sequential_bypasses_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->sequential_bypasses()); }));
  t.push_back(Stat("congested_bypasses", bdev, "requests sent around the cache because the cache device was congested",
                   "congested_bypasses_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->congested_bypasses()); }));
  for (int k = 0; k < BypassPolicy::kKinds; k++) {
    const auto kind = static_cast<BypassPolicy::Kind>(k);
    const bool write = kind != BypassPolicy::kRead;
    const char* flag = kind == BypassPolicy::kWriteFua          ? "fua"
                       : kind == BypassPolicy::kWriteAfterFlush ? "after_flush"
                                                                : "plain";
    static constexpr const char* kHelp[BypassPolicy::kKinds] = {
        "requests sent around the cache for any reason, by op and flag (fua; after_flush: arrived while a FLUSH "
        "was in flight, or first after one; plain): reads",
        "requests sent around the cache for any reason, by op and flag: writes neither FUA nor after a FLUSH",
        "requests sent around the cache for any reason, by op and flag: FUA writes",
        "requests sent around the cache for any reason, by op and flag: writes that arrived while a FLUSH was "
        "in flight, or first after one"};
    Attribute a = Stat(std::string("bypasses/") + BypassPolicy::KindName(kind), bdev, kHelp[k], "bypasses_total",
                       MetricType::kCounter,
                       [kind](Reading& r) { return Value::Int(r.target().device->bypasses(kind)); });
    a.labels = std::string("op=\"") + (write ? "write" : "read") + "\",flag=\"" + flag + "\"";
    t.push_back(std::move(a));
  }
  t.push_back(Stat("auto_congested_bypasses", bdev,
                   "requests sent around the cache because the cache device was expected to be slower than the "
                   "backing device (congested thresholds auto)",
                   "auto_congested_bypasses_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->auto_congested_bypasses()); }));
  t.push_back(Stat("spare_admissions", bdev,
                   "stream requests cached because the cache had free or dead space to spare (sequential_cutoff auto)",
                   "spare_admissions_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->spare_admissions()); }));
  t.push_back(Stat("ghost_admissions", bdev,
                   "stream requests cached because their range had bypassed recently and is read again "
                   "(sequential_cutoff auto)",
                   "ghost_admissions_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->ghost_admissions()); }));
  t.push_back(Stat("cache_full_bypasses", bdev,
                   "requests not cached because no cache space could be freed for them",
                   "cache_full_bypasses_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->cache_full_bypasses()); }));
  t.push_back(Stat("cutoff_writethroughs", bdev,
                   "writeback-mode writes written through because dirty data and metadata had filled the "
                   "cache past cutoff_writeback (cutoff_writeback_sync for FUA writes); writeback runs at full "
                   "speed meanwhile",
                   "cutoff_writethroughs_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->cutoff_writethroughs()); }));
  t.push_back(Stat("ordered_waits", bdev,
                   "writes and discards that went to the backing device only after writeback had written every "
                   "older epoch (writeback_order flush: the cache could not take them)",
                   "ordered_waits_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->ordered_waits()); }));
  t.push_back(Stat("discards_skipped", bdev,
                   "discards answered without reaching the backing device: in flush order they would have waited "
                   "for every older epoch to be written back (the data stays; a discard allows its content to go, "
                   "never requires it)",
                   "discards_skipped_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->discards_skipped()); }));
  t.push_back(Stat("zeroes_cached", bdev,
                   "write-zeroes of at most 4 MiB taken by the cache as writes of zeros: in flush order they "
                   "would have waited for every older epoch to be written back",
                   "zeroes_cached_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->zeroes_cached()); }));
  t.push_back(Stat("ordered_wait_us", bdev, "microseconds those writes and discards waited, summed",
                   "ordered_wait_microseconds_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->ordered_wait_us()); }));
  t.push_back(Stat("ordered_room_retries", bdev,
                   "of those writes, the ones turned away for space that went into the cache after all: it had "
                   "room again before writeback reached their epoch",
                   "ordered_room_retries_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->ordered_room_retries()); }));
  t.push_back(Stat("order_suspensions", bdev,
                   "times flush order was suspended because the cache was full of dirty epochs "
                   "(writeback_order_suspend)",
                   "order_suspensions_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().device->order_suspensions()); }));
  t.push_back(Stat("writeback_order_suspended", bdev,
                   "1 while flush order is suspended: writes reach the backing device in address order until the "
                   "cache has room again below cutoff_writeback",
                   "writeback_order_suspended", MetricType::kGauge,
                   [](Reading& r) { return Value::Int(r.target().device->order_suspended() ? 1 : 0); }));
  AddServiceTime(t, bdev, "backing", [](Reading& r) -> const ServiceTime& { return r.target().device->backing_time(); });
  {
    Attribute a = Stat("state", bdev, "no cache, clean or dirty, as bcache's state; fenced once another client "
                       "took the backing device over", "state",
                       MetricType::kGauge, [](Reading& r) {
                         const Target& t = r.target();
                         if (t.device->fenced()) return Value::Text("fenced");
                         if (!t.device->attached()) return Value::Text("no cache");
                         bool dirty = t.super ? t.super->state() == BackingState::kDirty : t.device->dirty_bytes() > 0;
                         return Value::Text(dirty ? "dirty" : "clean");
                       });
    a.enum_label = "state";
    a.choices = {"no cache", "clean", "dirty", "fenced"};
    t.push_back(std::move(a));
  }
  t.push_back(Stat("fenced", bdev,
                   "1 once another client took the backing device over (rbd: lock broken, client blocklisted): "
                   "every request fails, nothing is written back (doc/ceph.md)",
                   "fenced", MetricType::kGauge,
                   [](Reading& r) { return Value::Int(r.target().device->fenced() ? 1 : 0); }));
  t.push_back(Stat("fence_reason", bdev, "why the device is fenced (empty: it is not)", "", MetricType::kNone,
                   [](Reading& r) { return Value::Text(r.target().device->fence_reason()); }));
  t.push_back(Stat("backing_device", bdev, "the backing device, as serve --backing named it", "", MetricType::kNone,
                   [](Reading& r) { return Value::Text(r.target().device->spec()); }));
  t.push_back(Stat("running", bdev, "1 while the export is served", "running", MetricType::kGauge,
                   [](Reading&) { return Value::Int(1); }));
  t.push_back(Stat("size", bdev, "bytes the export serves", "size_bytes", MetricType::kGauge,
                   [](Reading& r) { return Value::Int(r.target().device->size()); }));
  AddRequests(t, bdev);

  // ---- cache set (bcache: /sys/fs/bcache/<uuid>/) ----
  t.push_back(AutoKnob("congested_read_threshold_us", cset,
                       "cache read latency above which reads start bypassing; 0 disables; auto: reads bypass "
                       "while the cache device is measured slower than the backing device",
                       &CacheKnobs::congested_read_threshold_us, kAutoThresholdUs, kUint - 1, "us", false,
                       "congested_read_threshold_seconds", 1e-6));
  t.push_back(AutoKnob("congested_write_threshold_us", cset, "the same for writes; 0 disables; auto: compared",
                       &CacheKnobs::congested_write_threshold_us, kAutoThresholdUs, kUint - 1, "us", false,
                       "congested_write_threshold_seconds", 1e-6));
  {
    Attribute a = IntKnob("btree_cache_size", cset, "memory for decoded index nodes", &CacheKnobs::btree_cache_size,
                          1 << 20, uint64_t{1} << 40, "bytes", true, "btree_cache_size_bytes");
    auto set_knob = a.set;
    a.set = [set_knob](const Target& t, std::string_view v) {
      UB_RETURN_IF_ERROR(set_knob(t, v));
      t.set->index().SetCacheBytes(t.set->knobs().btree_cache_size.load());
      return Status::OK();
    };
    t.push_back(std::move(a));
  }
  t.push_back(IntKnob("journal_delay_ms", cset,
                      "index changes not forced by FLUSH or FUA are committed within this long",
                      &CacheKnobs::journal_delay_ms, 1, 10000, "ms", false, "journal_delay_seconds", 1e-3));
  t.push_back(IntKnob("cutoff_writeback", cset, "percent of the cache in use above which writes stop going writeback",
                      &CacheKnobs::cutoff_writeback, 1, 70, "percent", false, "cutoff_writeback_percent"));
  t.push_back(IntKnob("cutoff_writeback_sync", cset, "the same for sync writes", &CacheKnobs::cutoff_writeback_sync,
                      1, 90, "percent", false, "cutoff_writeback_sync_percent"));
  t.push_back(Stat("cache_available_percent", cset, "buckets free or clean, percent", "cache_available_percent",
                   MetricType::kGauge, [](Reading& r) {
                     const auto& p = r.priority();
                     return Value::Int(p.unused_percent + p.clean_percent);
                   }));
  t.push_back(IntKnob("io_error_limit", cset, "cache device I/O errors after which the cache is failed; 0 never",
                      &CacheKnobs::io_error_limit, 0, kUint, "errors", false, "io_error_limit"));
  t.push_back(Stat("io_errors", cset, "cache device I/O errors since start", "io_errors_total",
                   MetricType::kCounter, [](Reading& r) { return Value::Int(r.target().set->io_errors()); }));
  t.push_back(Stat("cache_failed", cset, "1 once io_error_limit was passed: the backing devices are served alone",
                   "cache_failed", MetricType::kGauge,
                   [](Reading& r) { return Value::Int(r.target().set->failed() ? 1 : 0); }));
  t.push_back(Stat("congested", cset, "the congestion score: below 0 while the cache device is slow",
                   "congested", MetricType::kGauge,
                   [](Reading& r) { return Value::Real(static_cast<double>(r.target().set->congestion().score())); }));
  t.push_back(Stat("congested_slow_ios", cset,
                   "cache device completions slower than their congested threshold since start",
                   "congested_slow_ios_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().set->congestion().slow_ios()); }));
  t.push_back(Stat("bucket_size", cset, "bytes per bucket", "bucket_size_bytes", MetricType::kGauge,
                   [](Reading& r) { return Value::Int(r.target().set->options().bucket_size); }));
  t.push_back(Stat("nbuckets", cset, "buckets on the cache device", "buckets", MetricType::kGauge,
                   [](Reading& r) { return Value::Int(r.target().set->buckets().usage().buckets); }));
  t.push_back(Stat("average_key_size", cset, "average cached extent, bytes", "average_key_size_bytes",
                   MetricType::kGauge, [](Reading& r) {
                     auto s = r.target().set->index().stats();
                     uint64_t used = r.target().set->buckets().usage().data * r.target().set->options().bucket_size;
                     return Value::Int(s.extents ? used / s.extents : 0);
                   }));
  t.push_back(Stat("cache_device", cset, "the cache device", "", MetricType::kNone,
                   [](Reading& r) { return Value::Text(r.target().set->cache_dev()->spec()); }));
  {
    // The daemon's, shown once as the cache set's: one set per daemon.
    Attribute a = Stat("version", cset, "the ubcache version the daemon runs", "build_info", MetricType::kGauge,
                       [](Reading&) { return Value::Text(UBCACHE_VERSION); });
    a.enum_label = "version";
    a.choices = {UBCACHE_VERSION};
    t.push_back(std::move(a));
  }
  t.push_back(Stat("start_time", cset, "when the daemon started, unix seconds: a change is a restart",
                   "start_time_seconds", MetricType::kGauge,
                   [](Reading&) { return Value::Int(kStartTimeSeconds); }));

  // ---- cache device (bcache: /sys/block/<ssd>/bcache/) ----
  t.push_back(EnumKnob(
      "cache_replacement_policy", cdev, "which bucket is reclaimed first", "cache_replacement_policy", "policy",
      {"lru", "fifo", "random"}, "lru",
      [](Reading& r) { return Value::Text(ReplacementPolicyName(r.target().set->knobs().replacement.load())); },
      [](const Target& t, std::string_view v) -> Status {
        UB_ASSIGN_OR_RETURN(ReplacementPolicy p, ParseReplacementPolicy(v));
        t.set->knobs().replacement.store(p);
        return Status::OK();
      }));
  using PS = BucketAllocator::PriorityStats;
  struct Pct {
    const char* name;
    const char* help;
    unsigned PS::*member;
  };
  static const Pct kPct[] = {{"unused_percent", "buckets holding nothing", &PS::unused_percent},
                             {"clean_percent", "buckets holding clean data", &PS::clean_percent},
                             {"dirty_percent", "buckets holding dirty data", &PS::dirty_percent},
                             {"metadata_percent", "buckets holding metadata", &PS::metadata_percent}};
  for (const Pct& p : kPct)
    t.push_back(Stat(std::string("priority_stats/") + p.name, cdev, p.help, std::string("priority_stats_") + p.name,
                     MetricType::kGauge, [m = p.member](Reading& r) { return Value::Int(r.priority().*m); }));
  t.push_back(Stat("priority_stats/average", cdev, "average age of data buckets (priority steps)",
                   "priority_stats_average_age", MetricType::kGauge,
                   [](Reading& r) { return Value::Int(r.priority().average); }));
  t.push_back(Stat("priority_stats/bytes_per_quantile", cdev, "data bytes between two quantiles", "", MetricType::kNone,
                   [](Reading& r) { return Value::Int(r.priority().bytes_per_quantile); }));
  t.push_back(Stat("priority_stats/quantiles", cdev, "31 quantiles of data bucket age, youngest first",
                   "priority_stats_age", MetricType::kGauge, [](Reading& r) {
                     const PS& p = r.priority();
                     return Value::List(std::vector<double>(std::begin(p.quantiles), std::end(p.quantiles)));
                   }));
  AddServiceTime(t, cdev, "cache", [](Reading& r) -> const ServiceTime& { return r.target().set->cache_time(); });
  t.push_back(Stat("free_buckets", cdev, "buckets on the free list or reclaimable", "free_buckets",
                   MetricType::kGauge, [](Reading& r) { return Value::Int(r.target().set->buckets().usage().free); }));

  // ---- stats_* (per backing device) ----
  AddStatsGroup(t, Group::kStatsTotal, StatsWindow::kTotal);
  AddStatsGroup(t, Group::kStatsFiveMinute, StatsWindow::kFiveMinute);
  AddStatsGroup(t, Group::kStatsHour, StatsWindow::kHour);
  AddStatsGroup(t, Group::kStatsDay, StatsWindow::kDay);

  // ---- internal ----
  const Group in = Group::kInternal;
  t.push_back(Stat("internal/gc_runs", in, "garbage collections run", "gc_runs_total", MetricType::kCounter,
                   [](Reading& r) { return Value::Int(r.target().set->gc_runs()); }));
  struct IndexField {
    const char* name;
    const char* help;
    const char* metric;
    MetricType type;
    uint64_t ExtentIndex::Stats::*member;
  };
  using IS = ExtentIndex::Stats;
  static const IndexField kIndex[] = {
      {"btree_extents", "extents in the index", "btree_extents", MetricType::kGauge, &IS::extents},
      {"btree_nodes", "index nodes", "btree_nodes", MetricType::kGauge, &IS::nodes},
      {"btree_cached_nodes", "index nodes decoded in memory", "btree_cached_nodes", MetricType::kGauge,
       &IS::cached_nodes},
      {"btree_cached_bytes", "memory those nodes use", "btree_cached_bytes", MetricType::kGauge, &IS::cached_bytes},
      {"btree_node_reads", "index node reads", "btree_node_reads_total", MetricType::kCounter, &IS::node_reads},
      {"btree_node_writes", "index node writes", "btree_node_writes_total", MetricType::kCounter, &IS::node_writes},
      {"btree_node_parks", "index calls on a serving reactor that parked for a node read",
       "btree_node_parks_total", MetricType::kCounter, &IS::node_parks},
      {"journal_bytes", "journal bytes since the last checkpoint", "journal_bytes", MetricType::kGauge,
       &IS::journal_bytes},
  };
  for (const IndexField& f : kIndex)
    t.push_back(Stat(std::string("internal/") + f.name, in, f.help, f.metric, f.type,
                     [m = f.member](Reading& r) { return Value::Int(r.target().set->index().stats().*m); }));
  struct CommitField {
    const char* name;
    const char* help;
    const char* metric;
    uint64_t CacheSet::CommitStats::*member;
  };
  using CS = CacheSet::CommitStats;
  static const CommitField kCommit[] = {
      {"journal_reactor_commits", "soft commits (writeback acks) written on the serving reactor that led them",
       "journal_reactor_commits_total", &CS::reactor_commits},
      {"journal_handed_back", "soft commits a reactor gave back to the journal thread (journal busy or full)",
       "journal_handed_back_total", &CS::handed_back},
      {"journal_io_thread_calls", "synchronous cache-device I/O through the node store's I/O thread",
       "journal_io_thread_calls_total", &CS::io_thread_calls},
  };
  for (const CommitField& f : kCommit)
    t.push_back(Stat(std::string("internal/") + f.name, in, f.help, f.metric, MetricType::kCounter,
                     [m = f.member](Reading& r) { return Value::Int(r.target().set->commit_stats().*m); }));
  return t;
}

}  // namespace

const std::vector<Attribute>& Attributes() {
  static const std::vector<Attribute> table = BuildTable();
  return table;
}

const Attribute* FindAttribute(std::string_view name) {
  for (const Attribute& a : Attributes())
    if (a.name == name) return &a;
  return nullptr;
}

std::string AttributesMarkdown() {
  std::string out =
      "| name | group | default | writable: valid values | metric (ubcache_…) | meaning |\n"
      "|---|---|---|---|---|---|\n";
  for (const Attribute& a : Attributes()) {
    std::string metric = a.metric.empty() || a.type == MetricType::kNone ? "" : a.metric;
    if (!metric.empty() && !a.labels.empty()) metric += "{" + a.labels + "}";
    if (!metric.empty() && !a.enum_label.empty()) metric += "{" + a.enum_label + "=…}";
    if (!metric.empty() && a.type == MetricType::kCounter) metric += " (counter)";
    out += "| " + a.name + " | " + GroupName(a.group) + " | " + a.default_value + " | " +
           (a.set ? a.range : std::string("read-only")) + " | " + metric + " | " + a.help + " |\n";
  }
  return out;
}

Status SetAttribute(const Target& t, std::string_view name, std::string_view value) {
  const Attribute* a = FindAttribute(name);
  if (!a) return Status::NotFound("no attribute '" + std::string(name) + "' (see 'ubcache ctl show')");
  if (!a->set) return Status::InvalidArgument(std::string(name) + " is read-only");
  return a->set(t, value);
}

}  // namespace ubcache::control
