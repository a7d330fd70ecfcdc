// SPDX-License-Identifier: Apache-2.0
// ubcache serve: a device (and, with the cache core, a cache in front of
// it) served over NBD until SIGTERM.
#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "backend/block_device.h"
#include "backend/deadline_scheduler.h"
#include "backend/offset_device.h"
#include "cache/backing_super.h"
#include "cache/cache_set.h"
#include "cache/cached_device.h"
#include "cache/knobs.h"
#include "cache/superblock.h"
#include "control/attributes.h"
#include "control/control_server.h"
#include "frontend/nbd_connection.h"
#include "frontend/nbd_proto.h"
#include "frontend/nbd_server.h"
#include "frontend/ublk_server.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/listener_handover.h"
#include "tools/service.h"
#include "util/buffer_pool.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/size.h"
#include "util/thread_annotations.h"

namespace ubcache {

namespace {

// What the daemon's memory is bounded by; 130-soak checks it.
std::string MemoryHelp() {
  size_t conn = (kNbdMaxLiveBytes + nbd::kMaxPayload) / (1 << 20) + 1;
  size_t reactor = BufferPool::kMaxIdleBytes / (1 << 20);
  size_t tls = (kNbdMaxTlsBytes + (1 << 20) - 1) / (1 << 20);
  return "Memory: I/O buffers take at most " + std::to_string(conn) +
         " MiB per connection (its requests in flight; " + std::to_string(tls) +
         " MiB more under TLS)\nand " + std::to_string(reactor) +
         " MiB per reactor (idle buffers kept for reuse), on top of\n--btree-cache-size; as root "
         "all of it is locked in RAM (mlockall).\n";
}

// `st`'s message about the device `spec`, named once: the superblock
// readers already put the spec first.
std::string About(const std::string& spec, const Status& st) {
  return st.message().rfind(spec + ": ", 0) == 0 ? st.message() : spec + ": " + st.message();
}

// The options a running serve can change (a SIGHUP reload), named as the
// control attributes they set with '_' for '-'; --policy and --set too.
constexpr const char* kLiveFlags[] = {"cache-mode", "sequential-cutoff", "congested-read-threshold-us",
                                      "congested-write-threshold-us", "cache-replacement-policy",
                                      "btree-cache-size"};

// Applies the policy flags (bcache's knob names) to a cache set's knobs.
void ApplyKnobFlags(const Args& args, CacheKnobs& k) {
  auto fail = [&](const Status& st) { args.UsageError(st.message()); };
  if (args.Has("cache-mode")) {
    auto m = ParseCacheMode(args.Get("cache-mode"));
    if (!m.ok()) fail(m.status());
    k.cache_mode = *m;
  }
  if (args.Has("policy")) {
    std::string p = args.Get("policy");
    if (p == "bcache")
      k.UseBcachePolicy();
    else if (p != "auto")
      fail(Status::InvalidArgument("--policy: '" + p + "' (auto, bcache)"));
  }
  // The single knobs after --policy: they refine it.
  if (args.Has("sequential-cutoff")) {
    if (args.Get("sequential-cutoff") == "auto") {
      k.sequential_cutoff = kAutoCutoff;
    } else {
      auto v = ParseSize(args.Get("sequential-cutoff"));
      if (!v.ok()) fail(v.status());
      k.sequential_cutoff = *v;
    }
  }
  auto threshold = [&](const char* flag, std::atomic<uint32_t>& knob) {
    if (!args.Has(flag)) return;
    if (args.Get(flag) == "auto") {
      knob = kAutoThresholdUs;
      return;
    }
    auto v = ParseUint(args.Get(flag), 0, kAutoThresholdUs - 1, std::string("--") + flag);  // as ctl set
    if (!v.ok()) fail(v.status());
    knob = static_cast<uint32_t>(*v);
  };
  threshold("congested-read-threshold-us", k.congested_read_threshold_us);
  threshold("congested-write-threshold-us", k.congested_write_threshold_us);
  if (args.Has("cache-replacement-policy")) {
    auto p = ParseReplacementPolicy(args.Get("cache-replacement-policy"));
    if (!p.ok()) fail(p.status());
    k.replacement = *p;
  }
}

void LogStats(const std::string& name, CachedDevice& dev) {
  StatsGroup g = dev.stats().Snapshot(StatsWindow::kTotal, NowNanos());
  UB_INFO("export '{}': cache_hits {:.0f} cache_misses {:.0f} cache_hit_ratio {}% "
          "cache_bypass_hits {:.0f} cache_bypass_misses {:.0f} cache_miss_collisions {:.0f} "
          "bypassed {}",
          name, g.cache_hits, g.cache_misses, g.hit_ratio(), g.cache_bypass_hits,
          g.cache_bypass_misses, g.cache_miss_collisions,
          FormatSize(static_cast<uint64_t>(g.bypassed)));
}

// The --ublk devices, one per export, started (or with --recover
// reattached); exits 2 with a one-line error when that fails. Null without
// --ublk or a numbered --recover.
std::unique_ptr<UblkServer> StartUblk(const Args& args, const std::vector<NbdExport>& exports,
                                      uint32_t io_opt) {
  bool recover_auto = args.Get("recover") == "auto";
  if (!args.Has("ublk") && (!args.Has("recover") || recover_auto)) return nullptr;
  UblkServerOptions o;
  auto num = [&](const char* flag, uint64_t max) {
    auto v = ParseUint(args.Get(flag), 0, max, std::string("--") + flag);
    if (!v.ok()) args.UsageError(v.status().message());
    return *v;
  };
  if (args.Has("ublk-id")) o.first_id = static_cast<int>(num("ublk-id", 1u << 20));
  if (recover_auto) {
    if (!args.Has("ublk-id")) args.UsageError("--recover auto needs --ublk-id N: the devices to look for");
    o.recover_auto = true;
  } else if (args.Has("recover")) {
    o.first_id = static_cast<int>(num("recover", 1u << 20));
    o.recover = true;
  }
  o.queues = static_cast<unsigned>(num("queues", 256));
  o.depth = static_cast<unsigned>(num("depth", 4096));
  if (o.depth == 0) args.UsageError("--depth must be at least 1");
  std::vector<UblkExport> ue;
  for (const NbdExport& e : exports) ue.push_back({e.name, e.device, e.read_only, io_opt});
  auto server = std::make_unique<UblkServer>(std::move(ue), o);
  Status st = server->Start();
  if (!st.ok()) Die(2, st.message());
  return server;
}

// The control socket and metrics listener over the cache set's exports
// (null without a cache).
std::unique_ptr<control::ControlServer> StartControl(const Args& args, CacheSet* set,
                                                     const std::vector<control::Target>& targets,
                                                     control::Controller::StopHook stop) {
  if (!set) {
    if (args.Has("control") || args.Has("metrics-listen"))
      args.UsageError("--control and --metrics-listen need a --cache");
    return nullptr;
  }
  control::ControlServerOptions co;
  co.socket_path = args.Has("control") ? args.Get("control") : control::DefaultSocketPath(targets[0].name);
  co.socket_required = args.Has("control");
  co.metrics_listen = args.Get("metrics-listen");
  co.stop = std::move(stop);
  auto ctl = std::make_unique<control::ControlServer>(co, targets);
  Status st = ctl->Start();
  if (!st.ok()) Die(2, st.message());
  return ctl;
}

// A backing device fenced in an earlier run (another client took it over,
// CachedDevice::Fence): what the cache holds for it may be older than what
// the new owner wrote. Clean copies are dropped; dirty data is dropped or
// written back only as the operator says (--after-fence); without a word
// serve refuses to start. The fence is cleared after the drop is durable.
void ResolveFence(const Args& args, CacheSet& set, const std::string& spec, const Uuid& uuid, uint32_t dev,
                  uint64_t size, uint64_t since) {
  uint64_t dirty = set.index().DirtyBytes(dev);
  std::string choice = args.Has("after-fence") ? args.Get("after-fence") : "";
  time_t t = static_cast<time_t>(since);
  struct tm tm;
  gmtime_r(&t, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  if (dirty > 0 && choice.empty())
    Die(2, spec + ": fenced at " + when + " (another client took the device over) with " + FormatSize(dirty) +
               " of dirty data in the cache, which may be older than what the new owner wrote; start with "
               "--after-fence discard to drop it (the device's data as it is now wins), or --after-fence "
               "writeback to write it back over the device");
  if (dirty == 0 || choice == "discard") {
    Status st = set.DropDevice(dev, size);
    if (st.ok()) st = set.Commit();
    if (!st.ok()) Die(2, spec + ": cannot drop the cached data of a fenced device: " + st.message());
    UB_WARN("{}: fenced at {}: its cached data is dropped ({} of it dirty){}", spec, when, FormatSize(dirty),
            dirty ? " as --after-fence discard says" : "");
  } else {
    UB_WARN("{}: fenced at {}: its {} of dirty data will be written back over the device, as --after-fence "
            "writeback says", spec, when, FormatSize(dirty));
  }
  Status st = set.ClearFence(uuid);
  if (!st.ok()) Die(2, spec + ": cannot clear the fence on the cache device: " + st.message());
}

// --tls and its credentials into `so`; usage errors for what does not fit.
void TlsFromArgs(const Args& args, NbdServerOptions* so) {
  bool x509 = args.Has("tls-certificates"), psk = args.Has("tls-psk");
  if (x509 && psk) args.UsageError("--tls-certificates and --tls-psk: choose one");
  if (args.Has("tls-verify-peer") && !x509) args.UsageError("--tls-verify-peer needs --tls-certificates");
  std::string mode = args.Has("tls") ? args.Get("tls") : (x509 || psk) ? "require" : "off";
  if (mode == "off") {
    so->tls = nbd::TlsPolicy::kOff;
  } else if (mode == "on") {
    so->tls = nbd::TlsPolicy::kOn;
  } else if (mode == "require") {
    so->tls = nbd::TlsPolicy::kRequire;
  } else {
    args.UsageError("--tls " + mode + ": expected off, on or require");
  }
  if (so->tls == nbd::TlsPolicy::kOff) {
    if (x509 || psk) args.UsageError("--tls off with TLS credentials: drop one or the other");
    return;
  }
  if (!x509 && !psk) args.UsageError("--tls " + mode + " needs --tls-certificates DIR or --tls-psk FILE");
  auto creds = x509 ? TlsCredentials::ServerX509(args.Get("tls-certificates"), args.Has("tls-verify-peer"))
                    : TlsCredentials::ServerPsk(args.Get("tls-psk"));
  if (!creds.ok()) Die(2, creds.status().message());
  so->tls_credentials = std::move(*creds);
  UB_INFO("nbd: TLS {} with {}", mode == "on" ? "offered" : "required",
          x509 ? "X.509 certificates from " + args.Get("tls-certificates") +
                     (args.Has("tls-verify-peer") ? " (client certificates verified)" : "")
               : "pre-shared keys from " + args.Get("tls-psk"));
}

std::string ServiceHelp() {
  return "Under systemd (Type=notify, ubcache@.service): READY=1 once every export is\n"
         "served, STATUS= with the mode, hit ratio and dirty data every 5 s; SIGHUP\n"
         "re-reads --config.\n";
}

// serve's options; a reload parses the command line and --config again.
Args ServeArgs() {
  Args args("serve", "--backing SPEC (--nbd unix:PATH|tcp:HOST:PORT | --ublk) [options]",
            "Serves SPEC as an NBD export on every --nbd address and/or, with --ublk, as\n"
            "/dev/ublkbN, until SIGTERM or Ctrl-C; then stops accepting, finishes\n"
            "requests in flight, flushes, saves the cache's index and exits 0. With\n"
            "--recover auto (as the unit runs it) a stop hands over to the next start:\n"
            "the ublk devices stay, their I/O held, and the NBD listening sockets stay\n"
            "open; otherwise, or after `ubcache stop --delete`, the devices are deleted.\n"
            "Attach with any NBD client, e.g.\n"
            "  nbdinfo 'nbd+unix:///?socket=PATH'\n"
            "  nbd-client -unix PATH /dev/nbd0\n"
            "  qemu-io -f raw 'nbd+unix:///?socket=PATH'\n"
            "  nbdfuse DIR/disk --unix PATH\n"
            "Exit status: 0 stopped cleanly, 1 an error while serving (or stopped while\n"
            "fenced), 2 usage error or a device or listener that cannot be set up.");
  args.Option("backing", "SPEC", "the device to serve (repeatable with --cache)", std::nullopt, true)
      .Option("cache", "SPEC", "a cache device to put in front of every backing device")
      .Option("backing-scheduler", "S",
              "order of requests at each backing device: deadline (reads first, writes "
              "batched, one request at a time), none, or auto (deadline on a modelled spindle)",
              "auto")
      .Option("bucket-size", "SIZE", "bucket size of an unformatted cache (a formatted one keeps its own)",
              "512k")
      .Option("btree-cache-size", "SIZE", "memory for index nodes", "64M")
      .Option("cache-mode", "MODE",
              "writethrough, writeback, writearound or none; without it, the mode the first formatted "
              "backing device records (`ctl set cache_mode` persists it), else writethrough; the flag "
              "is recorded in every formatted backing device, as `ctl set cache_mode` would")
      .Option("policy", "P",
              "auto: the adaptive defaults below; bcache: bcache's fixed ones (sequential cutoff 4M, "
              "congested thresholds 2000 and 20000 us), for comparison", "auto")
      .Option("sequential-cutoff", "SIZE",
              "streams this long bypass the cache; 0 disables; auto: streams of 4M or more are cached "
              "while the cache has space to spare, and when read again soon after bypassing", "auto")
      .Option("congested-read-threshold-us", "US",
              "cache read latency above which reads start bypassing; 0 disables; auto: reads bypass "
              "only while the cache device is measured slower than the backing device", "auto")
      .Option("congested-write-threshold-us", "US", "the same for writes; 0 disables; auto: compared",
              "auto")
      .Option("cache-replacement-policy", "POLICY", "lru, fifo, random", "lru")
      .Option("nbd", "ADDR", "listen on unix:PATH or tcp:HOST:PORT (TCP only when asked)",
              std::nullopt, true)
      .Option("tls", "MODE",
              "NBD over TLS (NBD_OPT_STARTTLS): off; on (clients may upgrade); require (a "
              "client learns nothing before TLS). Default: require with credentials, else off")
      .Option("tls-certificates", "DIR",
              "X.509 credentials, as nbdkit and qemu-nbd lay them out: DIR/server-cert.pem, "
              "DIR/server-key.pem, and DIR/ca-cert.pem for --tls-verify-peer")
      .Option("tls-psk", "FILE", "pre-shared keys: lines of IDENTITY:HEXKEY, as psktool writes them")
      .Flag("tls-verify-peer",
            "with --tls-certificates: a client must present a certificate that ca-cert.pem signed")
      .Flag("ublk", "also serve every export as a ublk block device /dev/ublkbN (needs root "
                    "and the ublk_drv module)")
      .Option("ublk-id", "N", "ublk device id of the first export (then N+1, ...); default: any free")
      .Option("queues", "Q", "ublk queues per device, each one thread with its own io_uring "
                             "(0: one per core)", "0")
      .Option("depth", "D", "ublk queue depth", "128")
      .Option("recover", "N|auto",
              "N: reattach the ublk devices N, N+1, ... that a killed server left (implies --ublk); "
              "auto: with --ublk and --ublk-id, reattach each device that exists and add the others, "
              "so one command line starts the devices and takes them over after a crash or a stop; "
              "such a daemon also hands over at its own stop (the devices stay, and the NBD "
              "listening sockets), unless stopped with `ubcache stop --delete`")
      .Option("export", "NAME",
              "export name, one per --backing in order (the empty name selects the first)",
              "ubcache", true)
      .Option("description", "TEXT", "export description shown by nbdinfo")
      .Option("threads", "N", "reactor threads, each with its own io_uring (0: one per core)", "0")
      .Option("control", "PATH",
              "control socket for 'ubcache ctl' (default /run/ubcache/EXPORT.sock, with --cache)")
      .Option("metrics-listen", "HOST:PORT", "serve Prometheus metrics at http://HOST:PORT/metrics (with --cache)")
      .Flag("read-only", "refuse writes (EPERM) and open the device read-only")
      .Option("after-fence", "WHAT",
              "for a backing device fenced in an earlier run (another client took it over while its "
              "cache had dirty data; doc/ceph.md): discard drops that data, writeback writes it back "
              "over the device. Without it serve refuses such a device")
      .Option("set", "ATTR=VALUE",
              "set a writable control attribute at start, as `ubcache ctl set` would (e.g. "
              "writeback_percent=20; `ubcache ctl --list` lists them); needs --cache", std::nullopt, true)
      .Option("config", "FILE",
              "read more options from FILE, one per line (`cache-mode writeback`, "
              "`cache-mode=writeback` or `--cache-mode writeback`, a flag's name alone, # comments); "
              "the command line wins. SIGHUP re-reads it: changed knobs (cache-mode, "
              "sequential-cutoff, the congested thresholds, cache-replacement-policy, "
              "btree-cache-size, policy, set) apply at once, other changes at the next start")
      .Epilog(std::string(DeviceSpecHelp()) + "\n" + MemoryHelp() + "\n" + ServiceHelp());
  return args;
}

// The command line, then --config beneath it. `reload`: throws Args::Error
// instead of exiting on a usage error.
Args ParseServeArgs(int argc, char** argv, bool reload = false) {
  Args args = ServeArgs();
  if (reload) args.ThrowOnError();
  args.Parse(argc - 1, argv + 1);
  if (args.Has("config")) args.ParseFile(args.Get("config"), {"config"});
  return args;
}

// What the options that can change while serving ask for, as control
// attributes: --policy first, then the single knobs that refine it, then
// --set. A reload applies what changed between two of these.
std::map<std::string, std::string> LiveSettings(const Args& args) {
  std::map<std::string, std::string> m;
  if (args.Has("policy")) {
    bool bcache = args.Get("policy") == "bcache";
    m["sequential_cutoff"] = bcache ? std::to_string(kBcacheSequentialCutoff) : "auto";
    m["congested_read_threshold_us"] = bcache ? std::to_string(kBcacheCongestedReadUs) : "auto";
    m["congested_write_threshold_us"] = bcache ? std::to_string(kBcacheCongestedWriteUs) : "auto";
  }
  for (const char* flag : kLiveFlags) {
    if (!args.Has(flag)) continue;
    std::string attr = flag;
    std::replace(attr.begin(), attr.end(), '-', '_');
    m[attr] = args.Get(flag);
  }
  for (const std::string& kv : args.GetAll("set")) {
    auto eq = kv.find('=');
    m[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  return m;
}

// Sets `attr` to `value` on every export (an attribute of the cache set is
// set once per export: the same value, harmless).
Status SetEverywhere(const std::vector<control::Target>& targets, const std::string& attr,
                     const std::string& value) {
  for (const control::Target& t : targets) UB_RETURN_IF_ERROR(control::SetAttribute(t, attr, value));
  return Status::OK();
}

// SIGHUP: parses the command line and --config again and applies the live
// settings that changed since the last reading (`current`, which then
// becomes the new one); a changed option that only a start reads is
// reported, not applied. On an error in the file nothing changes.
void Reload(int argc, char** argv, std::unique_ptr<Args>& current,
            const std::vector<control::Target>& targets) {
  std::string file = current->Get("config");
  if (file.empty()) {
    UB_INFO("SIGHUP: serve has no --config to re-read; nothing changes");
    return;
  }
  std::unique_ptr<Args> fresh;
  try {
    fresh = std::make_unique<Args>(ParseServeArgs(argc, argv, true));
  } catch (const Args::Error& e) {
    UB_ERROR("SIGHUP: {}; nothing changes", e.message);
    return;
  }
  for (const std::string& name : fresh->Names()) {
    bool live = name == "policy" || name == "set" || name == "config" ||
                std::find(std::begin(kLiveFlags), std::end(kLiveFlags), name) != std::end(kLiveFlags);
    if (!live && fresh->GetAll(name) != current->GetAll(name))
      UB_WARN("SIGHUP: {}: --{} changed; it takes effect when serve starts again", file, name);
  }
  auto before = LiveSettings(*current), after = LiveSettings(*fresh);
  std::string applied;
  for (const auto& [attr, value] : after) {
    auto old = before.find(attr);
    if (old != before.end() && old->second == value) continue;
    if (targets.empty()) {
      UB_WARN("SIGHUP: {}: {} needs a --cache", file, attr);
      continue;
    }
    Status st = SetEverywhere(targets, attr, value);
    if (!st.ok()) {
      UB_ERROR("SIGHUP: {}: {}={}: {}", file, attr, value, st.message());
      continue;
    }
    applied += (applied.empty() ? "" : ", ") + attr + "=" + value;
  }
  for (const auto& [attr, value] : before)
    if (!after.count(attr))
      UB_WARN("SIGHUP: {}: {} is no longer set; it keeps its value ({}) until serve starts again", file,
              attr, value);
  UB_INFO("SIGHUP: re-read {}: {}", file, applied.empty() ? "no knob changed" : "set " + applied);
  current = std::move(fresh);
}

// STATUS= for the service manager: "writeback; hit ratio 93% (5 min 97%);
// dirty 1.2 GiB", and what is wrong first.
std::string ServiceStatus(const std::vector<std::unique_ptr<CachedDevice>>& cached, CacheSet* set,
                          size_t exports) {
  std::string n = std::to_string(exports) + (exports == 1 ? " export" : " exports");
  if (!set) return n + ", no cache";
  double hits = 0, misses = 0, hits5 = 0, misses5 = 0;
  uint64_t dirty = 0;
  size_t fenced = 0;
  uint64_t now = NowNanos();
  for (const auto& c : cached) {
    StatsGroup t = c->stats().Snapshot(StatsWindow::kTotal, now);
    StatsGroup f = c->stats().Snapshot(StatsWindow::kFiveMinute, now);
    hits += t.cache_hits;
    misses += t.cache_misses;
    hits5 += f.cache_hits;
    misses5 += f.cache_misses;
    dirty += c->dirty_bytes();
    fenced += c->fenced();
  }
  auto ratio = [](double h, double m) {
    return h + m > 0 ? std::to_string(static_cast<int>(100 * h / (h + m))) + "%" : std::string("-");
  };
  std::string s;
  if (fenced) s += std::to_string(fenced) + " FENCED; ";
  if (set->failed()) s += "CACHE FAILED; ";
  return s + n + ", " + CacheModeName(set->knobs().cache_mode.load()) + "; hit ratio " + ratio(hits, misses) +
         " (5 min " + ratio(hits5, misses5) + "); dirty " + FormatSize(dirty);
}

}  // namespace

int ServeMain(int argc, char** argv) {
  const Args args = ParseServeArgs(argc, argv);
  if (!args.positional().empty()) args.UsageError("unexpected argument '" + args.positional()[0] + "'");
  if (!args.Has("backing")) args.UsageError("--backing SPEC is required");
  bool recover_n = args.Has("recover") && args.Get("recover") != "auto";
  if (!args.Has("nbd") && !args.Has("ublk") && !recover_n)
    args.UsageError("--nbd unix:PATH, tcp:HOST:PORT or --ublk is required");
  if (args.Has("set") && !args.Has("cache")) args.UsageError("--set needs a --cache");
  for (const std::string& kv : args.GetAll("set"))
    if (kv.find('=') == std::string::npos || kv.front() == '=')
      args.UsageError("--set " + kv + ": expected ATTR=VALUE");
  if (!args.Has("nbd") && (args.Has("tls") || args.Has("tls-certificates") || args.Has("tls-psk")))
    args.UsageError("--tls and its credentials apply to --nbd listeners");
  if (args.Has("after-fence") && args.Get("after-fence") != "discard" && args.Get("after-fence") != "writeback")
    args.UsageError("--after-fence: discard or writeback, not '" + args.Get("after-fence") + "'");
  auto threads = ParseUint(args.Get("threads"), 0, 256, "--threads");
  if (!threads.ok()) args.UsageError(threads.status().message());

  OpenOptions opts;
  opts.read_only = args.Has("read-only");
  std::vector<std::string> backing_specs = args.GetAll("backing");
  std::vector<std::string> names = args.GetAll("export");
  if (names.size() > backing_specs.size()) args.UsageError("more --export names than --backing devices");
  if (backing_specs.size() > 1 && !args.Has("cache"))
    args.UsageError("several --backing devices need a --cache to share");
  for (size_t i = names.size(); i < backing_specs.size(); i++)
    names.push_back(i == 0 ? "ubcache" : "ubcache" + std::to_string(i));

  // SIGINT/SIGTERM are taken by the server's signalfd. Block them before any
  // thread starts (the cache set's housekeeping thread included): a thread
  // with them unblocked would let the default action kill the process.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);  // the service loop's (tools/service.h)
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // A block-device daemon must not wait for its own pages: under memory
  // pressure the kernel may evict the daemon's code or data, and faulting
  // them back in can take milliseconds on a busy disk — or never finish
  // when the paging goes through the device this daemon serves. Pages stay
  // resident once touched (ONFAULT: a sparse mem: device is not filled).
  // Only as root: elsewhere RLIMIT_MEMLOCK would make later allocations fail.
  // Locked pages that malloc frees inside its heap stay resident, so I/O
  // buffers never come from the heap (util/buffer_pool.h), and any other
  // allocation of 128 KiB or more is a mapping that goes back to the kernel
  // when freed: glibc's sliding mmap threshold would otherwise move such
  // allocations into the heap, where RSS only grows.
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  if (geteuid() == 0 && mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) != 0)
    UB_WARN("mlockall: {}; the daemon's pages may be evicted under memory pressure", strerror(errno));

  auto reactor = Reactor::Create();
  if (!reactor.ok()) Die(1, reactor.status().ToString());
  (*reactor)->Bind();  // superblock reads below are synchronous I/O on this thread

  // A formatted backing device is served from its data_offset; a dirty one
  // holds data only its cache has, and is never served without it.
  std::vector<std::unique_ptr<BlockDevice>> raw_backings;  // under an OffsetDevice
  std::vector<std::unique_ptr<BlockDevice>> backings;
  std::vector<std::unique_ptr<BackingSuper>> supers(backing_specs.size());  // formatted ones
  std::vector<BlockDevice*> opened;  // each --backing as opened: the one that may be fenced
  std::optional<CacheMode> sb_cache_mode;  // the first formatted backing device's
  std::optional<WritebackOrder> sb_writeback_order;  // ditto
  for (size_t i = 0; i < backing_specs.size(); i++) {
    const std::string& spec = backing_specs[i];
    auto dev = OpenDevice(spec, opts);
    if (!dev.ok()) Die(2, dev.status().message());
    opened.push_back(dev->get());
    uint64_t data_offset = 0;
    auto kind = Probe(**dev);
    if (!kind.ok()) Die(2, About(spec, kind.status()));
    if (*kind == SuperblockKind::kBacking) {
      auto sb = ReadBackingSuperblock(**dev);
      if (!sb.ok()) Die(2, About(spec, sb.status()));
      if (sb->state == BackingState::kDirty && !args.Has("cache"))
        Die(2, spec + ": the backing device is dirty (its cache holds newer data); serve it with "
                      "its --cache");
      data_offset = sb->data_offset_bytes();
      if (i >= args.GetAll("export").size() && !sb->label.empty()) names[i] = sb->label;
      UB_INFO("{}: bcache backing superblock, data at {}, label '{}'", spec, FormatSize(data_offset),
              sb->label);
      supers[i] = std::make_unique<BackingSuper>(dev->get(), *sb);
      if (!sb_cache_mode) sb_cache_mode = sb->cache_mode;
      if (!sb_writeback_order) sb_writeback_order = sb->writeback_order;
      if (!args.Has("cache") && !opts.read_only && sb->state == BackingState::kClean) {
        // Writes that bypass the cache set would leave its copy stale: the
        // device is detached first, so the set starts it cold next time.
        Status wst = supers[i]->Detach();
        if (!wst.ok()) Die(2, spec + ": cannot detach from its cache set: " + wst.message());
        UB_INFO("{}: served without its cache: detached from cache set {}", spec,
                FormatUuid(sb->set_uuid));
      }
    } else if (*kind != SuperblockKind::kNone) {
      Die(2, spec + ": holds a cache superblock; a cache device goes to --cache");
    }
    std::unique_ptr<BlockDevice> data;
    if (data_offset > 0) {
      raw_backings.push_back(std::move(dev).value());
      data = std::make_unique<OffsetDevice>(raw_backings.back().get(), data_offset);
    } else {
      data = std::move(dev).value();
    }
    // The superblock is read and written above the scheduler (rarely, and
    // synchronously); only the data goes through it.
    auto scheduled = WithScheduler(std::move(data), args.Get("backing-scheduler"));
    if (!scheduled.ok()) args.UsageError("--backing-scheduler: " + scheduled.status().message());
    backings.push_back(std::move(scheduled).value());
  }

  std::unique_ptr<BlockDevice> cache_dev;
  std::unique_ptr<CacheSet> set;
  std::vector<std::unique_ptr<CachedDevice>> cached;
  uint32_t io_opt = 0;  // the cache's bucket: the I/O size it prefers
  if (args.Has("cache")) {
    auto dev = OpenDevice(args.Get("cache"), OpenOptions{});
    if (!dev.ok()) Die(2, dev.status().message());
    cache_dev = std::move(dev).value();
    CacheSet::Options co;
    auto bucket = ParseSize(args.Get("bucket-size"));
    if (!bucket.ok()) args.UsageError("--bucket-size: " + bucket.status().message());
    co.bucket_size = *bucket;
    auto btree_cache = ParseSize(args.Get("btree-cache-size"));
    if (!btree_cache.ok()) args.UsageError("--btree-cache-size: " + btree_cache.status().message());
    co.btree_cache_size = *btree_cache;
    auto kind = Probe(*cache_dev);
    if (!kind.ok()) Die(2, About(args.Get("cache"), kind.status()));
    if (*kind != SuperblockKind::kCache && *kind != SuperblockKind::kNone)
      Die(2, args.Get("cache") + ": holds a backing or bcache superblock, not a cache");
    auto open_set = [&]() -> Result<std::unique_ptr<CacheSet>> {
      if (*kind == SuperblockKind::kNone) {
        UB_INFO("{}: no cache superblock: the index is kept in memory and every start is cold "
                "(warm restart needs `ubcache format --cache`)", args.Get("cache"));
        return CacheSet::Create(cache_dev.get(), co);
      }
      // A formatted cache keeps its geometry and its index (warm restart).
      auto sb = ReadCacheSuperblock(*cache_dev);
      if (!sb.ok()) Die(2, About(args.Get("cache"), sb.status()));
      return CacheSet::Open(cache_dev.get(), *sb, co);
    };
    Result<std::unique_ptr<CacheSet>> s = open_set();
    if (!s.ok()) Die(2, s.status().message());
    set = std::move(s).value();
    io_opt = static_cast<uint32_t>(set->options().bucket_size);
    // cache_mode and writeback_order persist in the backing superblock (ctl
    // set); --cache-mode overrides the mode and is persisted too (below, as
    // each device attaches), as --set writeback_order=... is (SetAttribute).
    if (sb_cache_mode) set->knobs().cache_mode = *sb_cache_mode;
    if (sb_writeback_order) set->knobs().writeback_order = *sb_writeback_order;
    ApplyKnobFlags(args, set->knobs());
    for (size_t i = 0; i < backings.size(); i++) {
      Uuid uuid{};
      bool attached = false;
      if (supers[i] && set->persistent()) {
        BackingSuperblock bsb = supers[i]->Get();
        uuid = bsb.uuid;
        attached = bsb.set_uuid == set->set_uuid() && bsb.state != BackingState::kNone;
        if (!attached && bsb.state == BackingState::kDirty)
          Die(2, backing_specs[i] + ": dirty in another cache set (" + FormatUuid(bsb.set_uuid) +
                     "); serve it with that cache");
        if (!attached && !opts.read_only) {
          // Record the attachment as bcache does: the set's uuid, state clean
          // (dirty only ever with writeback).
          Status wst = supers[i]->Attach(set->set_uuid());
          if (!wst.ok()) Die(2, backing_specs[i] + ": cannot attach: " + wst.message());
          UB_INFO("{}: attached to cache set {}", backing_specs[i], FormatUuid(set->set_uuid()));
        }
        // A --cache-mode given on the command line is the device's mode from
        // now on, as a `ctl set cache_mode` would make it: forget-cache and
        // the next start read it there.
        if (args.Has("cache-mode") && !opts.read_only) {
          Status mst = supers[i]->SetCacheMode(set->knobs().cache_mode.load());
          if (!mst.ok()) Die(2, backing_specs[i] + ": cannot record the cache mode: " + mst.message());
        }
      }
      uint32_t dev = set->DeviceNumber(uuid, attached);
      // Before the device (and its writeback thread) exists.
      if (auto since = set->persistent() ? set->FencedSince(uuid) : std::nullopt)
        ResolveFence(args, *set, backing_specs[i], uuid, dev, backings[i]->size(), *since);
      cached.push_back(std::make_unique<CachedDevice>(backing_specs[i], set.get(), dev, backings[i].get(),
                                                      set->persistent() ? supers[i].get() : nullptr));
      // Another client took the backing device over: this one stops
      // serving and writing it back (CachedDevice::Fence).
      opened[i]->SetFenceHandler([c = cached.back().get()](const std::string& why) { c->Fence(why); });
      if (set->knobs().cache_mode.load() == CacheMode::kWriteback && !cached.back()->can_writeback())
        UB_WARN("{}: writeback needs a formatted cache and backing device (ubcache format); "
                "writes go writethrough", backing_specs[i]);
    }
  }

  if (set && set->persistent()) {
    // The device numbers just handed out are in the table from now on: a
    // crash finds this run's extents (dirty ones included) under them.
    Status cst = set->Checkpoint();
    if (!cst.ok()) Die(2, args.Get("cache") + ": cannot write a checkpoint: " + cst.message());
  }

  std::vector<NbdExport> exports;
  for (size_t i = 0; i < backings.size(); i++) {
    NbdExport e;
    e.name = names[i];
    e.device = cached.empty() ? backings[i].get() : static_cast<BlockDevice*>(cached[i].get());
    e.description = args.Has("description") ? args.Get("description") : e.device->Describe();
    e.read_only = opts.read_only;
    exports.push_back(e);
  }

  // Growing an export (ctl resize, or an rbd: image resized by its owner):
  // the device stack from the bottom up (BlockDevice::Grow: backing, cache),
  // then its ublk device. One at a time: the two callers run on their own
  // threads. Without UPDATE_SIZE in the kernel the ublk device keeps its
  // size while the export (NBD) has grown: the reply is that one-line error.
  std::unique_ptr<UblkServer> ublk;
  Mutex grow_mu;
  std::vector<BlockDevice*> export_devices;
  for (const NbdExport& e : exports) export_devices.push_back(e.device);
  auto grow_export = [&, export_devices](size_t i) -> Result<std::string> {
    MutexLock l(&grow_mu);
    BlockDevice* dev = export_devices[i];
    uint64_t before = dev->size();
    Result<uint64_t> after = dev->Grow();
    if (!after.ok()) {
      std::string why = names[i] + ": " + after.status().message();
      return after.status().code() == Status::Code::kInvalidArgument ? Status::InvalidArgument(why)
                                                                      : Status::IoError(why);
    }
    std::string what = *after == before ? names[i] + ": " + FormatSize(before) + " (" + std::to_string(before) +
                                              " bytes), unchanged"
                                        : names[i] + ": grown from " + FormatSize(before) + " to " +
                                              FormatSize(*after) + " (" + std::to_string(*after) + " bytes)";
    if (ublk) {
      Status st = ublk->UpdateSize(i);
      if (!st.ok())
        return st.IsNotSupported() ? Status::NotSupported(what + "; " + st.message())
                                   : Status::IoError(what + "; " + st.message());
    }
    if (*after != before) UB_INFO("{}", what);
    return what;
  };

  // Each export as the control socket, --set and a reload see it.
  std::vector<control::Target> targets;
  std::vector<BackingSuper*> formatted;
  for (auto& s : supers)
    if (s) formatted.push_back(s.get());
  for (size_t i = 0; i < cached.size(); i++)
    targets.push_back({names[i], cached[i].get(), set.get(), supers[i].get(), formatted,
                       [&grow_export, i] { return grow_export(i); }});
  for (const std::string& kv : args.GetAll("set")) {
    auto eq = kv.find('=');
    Status sst = SetEverywhere(targets, kv.substr(0, eq), kv.substr(eq + 1));
    if (!sst.ok()) args.UsageError("--set " + kv + ": " + sst.message());
  }
  // What a stop does. A daemon that takes over from the previous one when
  // it starts (--recover auto, as the unit runs it) hands over to the next
  // one on SIGTERM/SIGINT: an upgrade or a restart keeps its ublk devices
  // (UblkServer::HandOff) and its NBD listening sockets. Any other daemon
  // deletes the devices and closes the sockets, as does `ubcache stop
  // --delete` (the control command `stop delete`): the final stop.
  const bool recover_auto = args.Get("recover") == "auto";
  std::atomic<bool> delete_devices{false};
  auto stop_hook = [&delete_devices, hand_off = recover_auto, ublk_on = args.Has("ublk")](bool del) {
    if (del) delete_devices.store(true);
    kill(getpid(), SIGTERM);  // taken by the server's signalfd, as an outside SIGTERM
    std::string what = "pid " + std::to_string(getpid()) + " stopping";
    if (hand_off && !del)
      what += std::string(", handing over to the next start: ") +
              (ublk_on ? "its ublk devices stay, their I/O held; " : "") + "its NBD listening sockets stay open";
    else if (ublk_on)
      what += "; its ublk devices are deleted";
    return what;
  };
  std::unique_ptr<control::ControlServer> ctl = StartControl(args, set.get(), targets, stop_hook);
  ublk = StartUblk(args, exports, io_opt);
  // An rbd: image resized by another client grows its export on its own.
  for (size_t i = 0; i < opened.size(); i++)
    opened[i]->SetResizeHandler([&grow_export, i] {
      Result<std::string> r = grow_export(i);
      if (!r.ok()) UB_WARN("{}", r.status().message());
    });
  // READY=1 once every export is served (the NBD listeners below, or the
  // ublk devices above); SIGHUP re-reads --config.
  std::unique_ptr<Args> reading = std::make_unique<Args>(args);
  ServiceLoop service({[&] { return ServiceStatus(cached, set.get(), backings.size()); },
                       [&] { Reload(argc, argv, reading, targets); }});
  auto start_service = [&] {
    Status sst = service.Start();
    if (!sst.ok()) UB_WARN("{}: no READY=1 for a service manager, no reload on SIGHUP", sst.message());
  };
  Status st;
  std::vector<int> kept_listeners;  // a hand-off's, for the next start
  if (args.Has("nbd")) {
    NbdServerOptions so;
    so.listen = args.GetAll("nbd");
    so.threads = static_cast<unsigned>(*threads);
    TlsFromArgs(args, &so);
    // The listening sockets pass from one daemon to the next
    // (tools/listener_handover.h): taken over here, kept open at a hand-off.
    so.inherited = InheritedListeners(so.listen);
    so.keep_listeners = recover_auto;
    NbdServer server(std::move(exports), so);
    st = server.Start();
    if (!st.ok()) {
      if (ublk) (void)ublk->Stop();  // no ublk device outlives a failed start
      Die(2, st.message());
    }
    bool stored = StoreListeners(server.listener_fds());
    start_service();
    st = server.Run();
    if (recover_auto) {
      kept_listeners = server.TakeListeners();
      // Under a service manager its fd store holds copies already.
      if (stored || delete_devices.load()) {
        for (int fd : kept_listeners) close(fd);
        kept_listeners.clear();
      }
    }
  } else {
    start_service();
    ublk->WaitForSignal();
  }
  service.Stop();
  if (ublk) {
    // A hand-off flushes and leaves the devices; the clean checkpoint of
    // set->Shutdown() below is then what the next start reads, so it
    // replays nothing. The next daemon must start after this one exited (a
    // restart does; by hand, its recovery refuses a device whose server
    // still lives).
    Status ust = recover_auto && !delete_devices.load() ? ublk->HandOff() : ublk->Stop();
    if (st.ok()) st = ust;
  }
  if (ctl) ctl->Stop();
  for (BlockDevice* d : opened) {  // before the cached devices go
    d->SetFenceHandler(nullptr);
    d->SetResizeHandler(nullptr);
  }
  for (size_t i = 0; i < cached.size(); i++) LogStats(names[i], *cached[i]);
  for (auto& c : cached) c->StopWriteback();  // dirty data stays dirty, and durable
  if (set) {
    // Every request has finished (the server drained): save the index.
    Status sst = set->Shutdown();
    if (!sst.ok()) UB_ERROR("cache shutdown: {} (the next start is cold)", sst.ToString());
  }
  // Last, when nothing else of this daemon runs: the keeper is a fork.
  KeepListeners(kept_listeners, args.GetAll("nbd"));
  if (!st.ok()) {
    UB_ERROR("{}", st.ToString());
    return 1;
  }
  return 0;
}

}  // namespace ubcache
