// SPDX-License-Identifier: Apache-2.0
#include "control/controller.h"

#include <cinttypes>
#include <cstdio>

#include "backend/sync_io.h"
#include "cache/superblock.h"
#include "control/metrics.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/size.h"

namespace ubcache::control {

namespace {

std::string JsonKey(const std::string& k) { return Value::Text(k).ToJson(); }

// "name value" lines, or one JSON object of them.
class Listing {
 public:
  explicit Listing(bool json) : json_(json) {}
  void Add(const std::string& name, const Value& v) {
    if (json_)
      out_ += (out_.empty() ? "{" : ",") + JsonKey(name) + ":" + v.ToJson();
    else
      out_ += name + " " + v.ToString() + "\n";
  }
  void Header(const std::string& text) {
    if (!json_) out_ += (out_.empty() ? "" : "\n") + std::string("# ") + text + "\n";
  }
  std::string Done() { return json_ ? (out_.empty() ? "{}" : out_ + "}") + "\n" : out_; }

 private:
  bool json_;
  std::string out_;
};

std::string Message(bool json, const std::string& text) {
  return json ? "{\"result\":" + JsonKey(text) + "}\n" : text + "\n";
}

}  // namespace

Result<const Target*> Controller::Find(const std::string& device) const {
  if (targets_.empty()) return Status::NotFound("the daemon serves no cached device");
  if (device.empty()) return &targets_[0];
  std::string names;
  for (const Target& t : targets_) {
    if (t.name == device) return &t;
    names += (names.empty() ? "" : ", ") + t.name;
  }
  return Status::NotFound("no device '" + device + "' (exports: " + names + ")");
}

std::string Controller::Show(const Target& t, bool json, std::optional<Group> only) const {
  Reading r(t);
  Listing l(json);
  for (Group g : kAllGroups) {
    if (only && g != *only) continue;
    l.Header(std::string(GroupName(g)) + (PerDevice(g) ? " (" + t.name + ")" : ""));
    for (const Attribute& a : Attributes())
      if (a.group == g) l.Add(a.name, a.get(r));
  }
  return l.Done();
}

std::string Controller::Metrics() const { return RenderMetrics(targets_); }

Result<std::string> Controller::Flush(const Target& t, const Progress& progress, const Cancelled& cancelled) {
  // bcache's writeback drain, then a flush of both devices: everything the
  // client wrote is on the backing device's media when this returns.
  uint64_t t0 = NowNanos();
  uint64_t before = t.device->dirty_bytes();
  if (Writeback* wb = t.device->writeback()) {
    Status st = wb->Drain(progress, cancelled);
    if (!st.ok()) return Status::IoError("flush " + t.name + ": " + st.message());
  } else {
    progress("flush " + t.name + ": " + FormatSize(0) + " dirty left, " + FormatSize(0) + "/s");
  }
  Status st = SyncFlush(*t.device);
  if (!st.ok()) return Status::IoError("flush " + t.name + ": " + st.message());
  char elapsed[32];
  std::snprintf(elapsed, sizeof elapsed, "%.1f s", static_cast<double>(NowNanos() - t0) / 1e9);
  return "flush " + t.name + ": clean, " + FormatSize(before) + " written back, " + FormatSize(t.device->dirty_bytes()) +
         " dirty, " + elapsed;
}

Result<std::string> Controller::Detach(const Target& t, const Progress& progress, const Cancelled& cancelled) {
  if (!t.device->attached()) return Status::InvalidArgument(t.name + " is already detached");
  UB_ASSIGN_OR_RETURN(std::string flushed, Flush(t, progress, cancelled));
  progress(flushed);
  UB_RETURN_IF_ERROR(t.device->Detach());
  std::string sb_note = "not formatted, no superblock to update";
  if (t.super) {
    // bcache's detach: the superblock says no cache (state none, no set uuid).
    // After the flush above nothing is dirty, so this is safe to write first.
    Status st = t.super->Detach();
    if (!st.ok()) return Status::IoError(t.name + " detached, but its backing superblock was not updated: " + st.message());
    sb_note = "backing superblock: clean and detached (state none, no cache set)";
  }
  UB_INFO("control: detached '{}' from its cache", t.name);
  return t.name + " detached: served from " + t.device->backing()->spec() + " without the cache; " + sb_note;
}

Result<std::string> Controller::Attach(const Target& t, const std::string& cache) {
  BlockDevice* cache_dev = t.set->cache_dev();
  // The daemon has one cache set; CACHE names it by its device spec or, when
  // the cache is formatted, by its set uuid.
  std::optional<CacheSuperblock> csb;
  if (auto sb = ReadCacheSuperblock(*cache_dev); sb.ok()) csb = *sb;
  bool same = cache == cache_dev->spec() || (csb && cache == FormatUuid(csb->set_uuid));
  if (!same)
    return Status::InvalidArgument("'" + cache + "' is not this daemon's cache set (it runs " + cache_dev->spec() +
                                   (csb ? ", set " + FormatUuid(csb->set_uuid) : std::string()) +
                                   "); attaching another cache needs a restart with --cache");
  if (t.device->attached()) return Status::InvalidArgument(t.name + " is already attached to " + cache_dev->spec());
  UB_RETURN_IF_ERROR(t.device->Attach());
  std::string sb_note = "not formatted, no superblock to update";
  if (t.super) {
    // bcache's "clean" names the set it is attached to; an unformatted
    // cache has no set uuid, so the superblock then stays detached.
    Status st;
    if (csb) st = t.super->Attach(csb->set_uuid);
    if (!st.ok()) return Status::IoError(t.name + " attached, but its backing superblock was not updated: " + st.message());
    sb_note = csb ? "backing superblock: state clean, set " + FormatUuid(csb->set_uuid)
                  : "the cache is not formatted, so the backing superblock stays detached";
  }
  UB_INFO("control: attached '{}' to {}", t.name, cache_dev->spec());
  return t.name + " attached to " + cache_dev->spec() + "; " + sb_note;
}

bool Controller::RunsLong(const Request& r) {
  return r.command == "set" || r.command == "flush" || r.command == "detach" || r.command == "attach" ||
         r.command == "trigger-gc" || r.command == "resize";
}

Result<std::string> Controller::Execute(const Request& r, const Progress& progress, const Cancelled& cancelled) {
  if (r.command == "metrics") return Metrics();
  if (r.command == "devices") {
    std::string out;
    for (const Target& t : targets_)
      out += r.json ? (out.empty() ? "" : ",") + JsonKey(t.name) : t.name + "\n";
    return r.json ? "{\"devices\":[" + out + "]}\n" : out;
  }
  if (r.command == "stop") {
    if (!r.args.empty() && r.args[0] != "delete")
      return Status::InvalidArgument("stop: '" + r.args[0] + "': the only argument is delete");
    if (!stop_) return Status::NotSupported("stop: this daemon takes SIGTERM only");
    return stop_(!r.args.empty()) + "\n";
  }
  UB_ASSIGN_OR_RETURN(const Target* tp, Find(r.device));
  const Target& t = *tp;
  const bool json = r.json;
  if (r.command == "show") return Show(t, json, std::nullopt);
  if (r.command == "get") {
    const Attribute* a = FindAttribute(r.args[0]);
    if (!a) return Status::NotFound("no attribute '" + r.args[0] + "' (see 'ubcache ctl show')");
    Reading rd(t);
    Value v = a->get(rd);
    return json ? "{" + JsonKey(a->name) + ":" + v.ToJson() + "}\n" : v.ToString() + "\n";
  }
  if (r.command == "set") {
    UB_RETURN_IF_ERROR(SetAttribute(t, r.args[0], r.args[1]));
    Reading rd(t);
    Value v = FindAttribute(r.args[0])->get(rd);
    UB_INFO("control: {} set to {}", r.args[0], v.ToString());
    return json ? "{" + JsonKey(r.args[0]) + ":" + v.ToJson() + "}\n" : r.args[0] + " " + v.ToString() + "\n";
  }
  if (r.command == "stats") {
    if (r.args.empty()) {
      std::string out = json ? "{" : "";
      for (Group g : {Group::kStatsTotal, Group::kStatsFiveMinute, Group::kStatsHour, Group::kStatsDay}) {
        std::string part = Show(t, json, g);
        if (json) {
          part = part.substr(1, part.size() - 3);  // the members of {...}\n
          out += (out.size() > 1 && !part.empty() ? "," : "") + part;
        } else {
          out += (out.empty() ? "" : "\n") + part;
        }
      }
      return json ? out + "}\n" : out;
    }
    std::optional<Group> g = ParseGroup(r.args[0]);
    if (!g) {
      std::string names;
      for (Group x : kAllGroups) names += (names.empty() ? "" : ", ") + std::string(GroupName(x));
      return Status::InvalidArgument("no group '" + r.args[0] + "' (groups: " + names + ")");
    }
    return Show(t, json, g);
  }
  if (r.command == "priority-stats") {
    BucketAllocator::PriorityStats p = t.set->buckets().priority_stats();
    std::string q;
    for (unsigned i = 0; i < BucketAllocator::kQuantiles; i++)
      q += (i ? (json ? "," : " ") : "") + std::to_string(p.quantiles[i]);
    uint64_t sectors = p.bytes_per_quantile / 512;
    if (json)
      return "{\"unused_percent\":" + std::to_string(p.unused_percent) +
             ",\"clean_percent\":" + std::to_string(p.clean_percent) +
             ",\"dirty_percent\":" + std::to_string(p.dirty_percent) +
             ",\"metadata_percent\":" + std::to_string(p.metadata_percent) +
             ",\"average\":" + std::to_string(p.average) + ",\"sectors_per_q\":" + std::to_string(sectors) +
             ",\"quantiles\":[" + q + "]}\n";
    return "Unused:\t\t" + std::to_string(p.unused_percent) + "%\nClean:\t\t" + std::to_string(p.clean_percent) +
           "%\nDirty:\t\t" + std::to_string(p.dirty_percent) + "%\nMetadata:\t" +
           std::to_string(p.metadata_percent) + "%\nAverage:\t" + std::to_string(p.average) +
           "\nSectors per Q:\t" + std::to_string(sectors) + "\nQuantiles:\t[" + q + "]\n";
  }
  if (r.command == "dirty-data") {
    uint64_t d = t.device->dirty_bytes();
    return json ? "{\"dirty_data\":" + std::to_string(d) + "}\n" : std::to_string(d) + "\n";
  }
  if (r.command == "writeback-rate-debug") {
    // bcache's writeback_rate_debug, from the writeback thread's last update.
    Writeback::RateDebug d{};
    if (Writeback* wb = t.device->writeback()) d = wb->rate_debug();
    else d.rate = t.set->knobs().writeback_rate.load();
    Listing l(json);
    if (json) {
      l.Add("rate", Value::Int(d.rate));
      l.Add("dirty", Value::Int(d.dirty));
      l.Add("target", Value::Int(d.target));
      l.Add("proportional", Value::Real(static_cast<double>(d.proportional)));  // signed
      l.Add("integral", Value::Real(static_cast<double>(d.integral)));  // signed
      l.Add("fragment", Value::Real(static_cast<double>(d.fragment)));  // signed
      l.Add("change", Value::Real(static_cast<double>(d.change)));  // signed
      l.Add("next_io", Value::Int(d.next_io_ms));
      l.Add("lag_over_target", Value::Int(d.lag_over_target ? 1 : 0));
      return l.Done();
    }
    auto sz = [](int64_t v) { return (v < 0 ? "-" : "") + FormatSize(static_cast<uint64_t>(v < 0 ? -v : v)); };
    return "rate:\t\t" + FormatSize(d.rate) + "/sec\ndirty:\t\t" + FormatSize(d.dirty) + "\ntarget:\t\t" +
           FormatSize(d.target) + "\nproportional:\t" + sz(d.proportional) + "\nintegral:\t" + sz(d.integral) +
           "\nfragment:\t" + sz(d.fragment) + "\nchange:\t\t" + sz(d.change) + "/sec\nnext io:\t" +
           std::to_string(d.next_io_ms) + "ms\n" +
           (d.lag_over_target ? "lag:\t\tpast twice writeback_lag_target: full speed\n" : "");
  }
  if (r.command == "clear-stats") {
    t.device->stats().Clear();
    return Message(json, "statistics of " + t.name + " cleared");
  }
  if (r.command == "trigger-gc") {
    uint64_t moved_before = t.set->moving_gc_bytes();
    UB_ASSIGN_OR_RETURN(uint64_t dropped, t.set->RunGc(true));
    return Message(json, "gc: dropped " + std::to_string(dropped) + " stale extents, moved " +
                             FormatSize(t.set->moving_gc_bytes() - moved_before) + " out of fragmented buckets");
  }
  if (r.command == "flush") {
    UB_ASSIGN_OR_RETURN(std::string s, Flush(t, progress, cancelled));
    return Message(json, s);
  }
  if (r.command == "detach") {
    UB_ASSIGN_OR_RETURN(std::string s, Detach(t, progress, cancelled));
    return Message(json, s);
  }
  if (r.command == "resize") {
    if (!t.resize) return Status::NotSupported(t.name + ": this daemon cannot resize it");
    UB_ASSIGN_OR_RETURN(std::string s, t.resize());
    return Message(json, s);
  }
  if (r.command == "attach") {
    UB_ASSIGN_OR_RETURN(std::string s, Attach(t, r.args[0]));
    return Message(json, s);
  }
  return Status::InvalidArgument("unknown command '" + r.command + "'");
}

}  // namespace ubcache::control
