// SPDX-License-Identifier: Apache-2.0
// ubcache status: every running daemon on the machine (found by its control
// socket) and, for each export, what an operator looks at first — in the
// spirit of bcache-status. Exit status: 0 all well, 1 something is wrong
// (a fenced or detached export, a failed cache device, a daemon that does
// not answer), 2 usage error, 3 no daemon running.
#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "control/attributes.h"
#include "control/control_server.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/ctl_client.h"
#include "util/size.h"

namespace ubcache {

namespace {

// What one export's status is made of: attribute names as `ctl show`
// lists them.
const char* const kAttributes[] = {
    "backing_device", "size", "cache_mode", "state", "fence_reason", "stats_total/cache_hit_ratio",
    "stats_five_minute/cache_hit_ratio", "stats_five_minute/cache_hits", "stats_five_minute/cache_misses",
    "dirty_data", "writeback_rate", "writeback_errors", "writeback_order", "writeback_order_suspended", "writeback_lag_seconds",
    "dirty_epochs",
    "cache_available_percent", "cache_device", "cache_failed", "io_errors"};

struct Export {
  std::string name;
  std::map<std::string, std::string> a;  // attribute -> value as text
  std::vector<std::string> problems;
  uint64_t Num(const std::string& k) const {
    auto it = a.find(k);
    return it == a.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
  }
  const std::string& Text(const std::string& k) const {
    static const std::string none;
    auto it = a.find(k);
    return it == a.end() ? none : it->second;
  }
};

struct Daemon {
  std::string socket;
  std::string error;  // it did not answer
  std::vector<Export> exports;
};

std::vector<std::string> Sockets(const std::string& dir) {
  std::vector<std::string> found;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".sock") == 0) found.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  return found;
}

Result<std::string> Ask(const std::string& socket, const std::string& device, const std::string& command,
                        std::vector<std::string> args = {}) {
  control::Request req;
  req.command = command;
  req.device = device;
  req.args = std::move(args);
  UB_ASSIGN_OR_RETURN(ControlReply r, CallControl(socket, req, 10000));
  if (!r.ok) return Status::IoError(r.body);
  if (!r.body.empty() && r.body.back() == '\n') r.body.pop_back();
  return r.body;
}

Daemon Query(const std::string& socket) {
  Daemon d;
  d.socket = socket;
  auto names = Ask(socket, "", "devices");
  if (!names.ok()) {
    d.error = names.status().message();
    return d;
  }
  size_t pos = 0;
  while (pos < names->size()) {
    size_t nl = names->find('\n', pos);
    if (nl == std::string::npos) nl = names->size();
    Export e;
    e.name = names->substr(pos, nl - pos);
    pos = nl + 1;
    if (e.name.empty()) continue;
    for (const char* attr : kAttributes) {
      auto v = Ask(socket, e.name, "get", {attr});
      if (v.ok()) e.a[attr] = *v;
    }
    const std::string& state = e.Text("state");
    if (state == "fenced") e.problems.push_back("fenced: " + e.Text("fence_reason"));
    if (state == "no cache") e.problems.push_back("detached: served without its cache");
    if (e.Num("cache_failed")) e.problems.push_back("the cache device failed (" + e.Text("io_errors") + " I/O errors)");
    if (e.Num("writeback_errors") && state == "dirty")
      e.problems.push_back(e.Text("writeback_errors") + " writeback errors (the data stays dirty and is retried)");
    d.exports.push_back(std::move(e));
  }
  return d;
}

std::string Percent(const std::string& v) { return v.empty() ? "?" : v + " %"; }

std::string JsonStr(const std::string& s) { return control::Value::Text(s).ToJson(); }

void PrintText(const std::vector<Daemon>& daemons, size_t problems, size_t exports) {
  std::printf("ubcache status: %zu daemon%s, %zu export%s, %s\n", daemons.size(), daemons.size() == 1 ? "" : "s",
              exports, exports == 1 ? "" : "s",
              problems ? (std::to_string(problems) + " problem" + (problems == 1 ? "" : "s")).c_str() : "all well");
  for (const Daemon& d : daemons) {
    std::printf("\n%s\n", d.socket.c_str());
    if (!d.error.empty()) {
      std::printf("  NOT ANSWERING: %s\n", d.error.c_str());
      continue;
    }
    for (const Export& e : d.exports) {
      bool writeback = e.Text("cache_mode") == "writeback";
      uint64_t hits5 = e.Num("stats_five_minute/cache_hits"), misses5 = e.Num("stats_five_minute/cache_misses");
      std::printf("  %s\n", e.name.c_str());
      std::printf("    backing  %s, %s\n", e.Text("backing_device").c_str(), FormatSize(e.Num("size")).c_str());
      std::printf("    cache    %s, %s, %s used\n", e.Text("cache_device").c_str(), e.Text("cache_mode").c_str(),
                  Percent(std::to_string(100 - std::min<uint64_t>(100, e.Num("cache_available_percent")))).c_str());
      std::printf("    state    %s\n", e.Text("state").c_str());
      std::printf("    hits     %s total, %s in the last five minutes\n", Percent(e.Text("stats_total/cache_hit_ratio")).c_str(),
                  hits5 + misses5 ? Percent(e.Text("stats_five_minute/cache_hit_ratio")).c_str() : "no reads");
      // The lag: in flush order the backing device holds every write
      // acknowledged before that long ago (issue 30 item 3).
      std::string lag;
      if (e.Num("dirty_data") > 0 && !e.Text("writeback_lag_seconds").empty())
        lag = ", " + e.Text("dirty_epochs") + " epochs, " + e.Text("writeback_order") + " order" +
              (e.Num("writeback_order_suspended") ? " (suspended: cache full)" : "") + ", lag " +
              e.Text("writeback_lag_seconds") + " s";
      std::printf("    dirty    %s%s%s\n", FormatSize(e.Num("dirty_data")).c_str(),
                  writeback ? (", writeback " + FormatSize(e.Num("writeback_rate")) + "/s").c_str() : "", lag.c_str());
      for (const std::string& p : e.problems) std::printf("    PROBLEM  %s\n", p.c_str());
    }
  }
}

void PrintJson(const std::vector<Daemon>& daemons, size_t problems) {
  std::string out = "{\"problems\":" + std::to_string(problems) + ",\"daemons\":[";
  for (size_t i = 0; i < daemons.size(); i++) {
    const Daemon& d = daemons[i];
    out += (i ? "," : "") + std::string("{\"socket\":") + JsonStr(d.socket) +
           ",\"answering\":" + (d.error.empty() ? "true" : "false");
    if (!d.error.empty()) out += ",\"error\":" + JsonStr(d.error);
    out += ",\"exports\":[";
    for (size_t j = 0; j < d.exports.size(); j++) {
      const Export& e = d.exports[j];
      out += (j ? "," : "") + std::string("{\"name\":") + JsonStr(e.name);
      for (const auto& [k, v] : e.a) {
        bool number = !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
        out += "," + JsonStr(k) + ":" + (number ? v : JsonStr(v));
      }
      out += ",\"problems\":[";
      for (size_t k = 0; k < e.problems.size(); k++) out += (k ? "," : "") + JsonStr(e.problems[k]);
      out += "]}";
    }
    out += "]}";
  }
  std::printf("%s]}\n", out.c_str());
}

}  // namespace

int StatusMain(int argc, char** argv) {
  Args args("status", "[--json] [--dir DIR | --control PATH...]",
            "Every running 'ubcache serve' on this machine, found by its control socket in\n"
            "DIR, and for each export: backing and cache device, size, cache mode, state\n"
            "(clean, dirty, fenced, no cache), hit ratio (total and five minutes), dirty\n"
            "data and writeback rate, cache usage, and anything wrong. Exit status: 0 all\n"
            "well, 1 a problem (fenced, detached, failed cache device, writeback errors, a\n"
            "daemon that does not answer), 2 usage error, 3 no daemon running.");
  args.Flag("json", "print it as JSON (the attributes as 'ubcache ctl get' names them)")
      .Option("dir", "DIR", "where the daemons' control sockets are", "/run/ubcache")
      .Option("control", "PATH", "a daemon's control socket (repeatable; instead of --dir)", std::nullopt, true);
  args.Parse(argc - 1, argv + 1);
  if (!args.positional().empty()) args.UsageError("unexpected argument '" + args.positional()[0] + "'");
  std::vector<std::string> sockets = args.Has("control") ? args.GetAll("control") : Sockets(args.Get("dir"));
  if (sockets.empty()) {
    if (args.Has("json"))
      std::printf("{\"problems\":0,\"daemons\":[]}\n");
    else
      std::printf("ubcache status: no daemon running (no control socket in %s)\n", args.Get("dir").c_str());
    return 3;
  }
  std::vector<Daemon> daemons;
  size_t problems = 0, exports = 0;
  for (const std::string& s : sockets) {
    daemons.push_back(Query(s));
    problems += daemons.back().error.empty() ? 0 : 1;
    exports += daemons.back().exports.size();
    for (const Export& e : daemons.back().exports) problems += e.problems.size();
  }
  if (args.Has("json"))
    PrintJson(daemons, problems);
  else
    PrintText(daemons, problems, exports);
  return problems ? 1 : 0;
}

}  // namespace ubcache
