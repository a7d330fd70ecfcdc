// SPDX-License-Identifier: Apache-2.0
// ubcache ctl: one request to a running daemon's control socket (see
// doc/control.md), its reply on stdout. Exit status: 0 ok, 1 the daemon
// answered with an error, 2 usage error or no daemon to talk to.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "control/attributes.h"
#include "control/control_server.h"
#include "control/protocol.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/ctl_client.h"

namespace ubcache {

namespace {

using control::FrameKind;

// Without --control: the one socket in /run/ubcache, else the default name.
std::string FindSocket() {
  std::vector<std::string> found;
  if (DIR* d = opendir("/run/ubcache")) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".sock") == 0) found.push_back("/run/ubcache/" + n);
    }
    closedir(d);
  }
  return found.size() == 1 ? found[0] : control::DefaultSocketPath("ubcache");
}

std::string CommandList() {
  std::string s = "Commands:\n";
  for (const auto& c : control::Commands()) {
    std::string head = std::string(c.name) + (*c.args ? " " : "") + c.args;
    char line[160];
    std::snprintf(line, sizeof line, "  %-22s %s\n", head.c_str(), c.help);
    s += line;
  }
  return s;
}

}  // namespace

int CtlMain(int argc, char** argv) {
  Args args("ctl", "[--control PATH] [--device NAME] [--json] COMMAND [ARGS]",
            "Talks to a running 'ubcache serve' over its control socket: shows and sets\n"
            "knobs (bcache's names), statistics, priority stats and metrics, and\n"
            "flushes, detaches, attaches or grows a device. Exit status: 0 ok, 1 the\n"
            "daemon refused or failed the request, 2 usage error or socket\n"
            "unreachable.");
  args.Option("control", "PATH", "the daemon's control socket (default: the one in /run/ubcache)")
      .Option("device", "NAME", "the export to act on (default: the daemon's first)")
      .Flag("json", "print the reply as JSON")
      .Flag("list", "print the table of attributes (Markdown) and exit; needs no daemon")
      .Epilog(CommandList() +
              "\nNAME is an attribute as 'show' lists it (sequential_cutoff, stats_total/cache_hits, ...);\n"
              "sizes take units (4M). GROUP: backing_device, cache_set, cache_device, stats_total,\n"
              "stats_five_minute, stats_hour, stats_day, internal.");
  args.Parse(argc - 1, argv + 1);
  if (args.Has("list")) {
    std::fputs(control::AttributesMarkdown().c_str(), stdout);
    return 0;
  }
  const auto& pos = args.positional();
  if (pos.empty()) args.UsageError("a COMMAND is required");
  const control::CommandSpec* spec = control::FindCommand(pos[0]);
  if (!spec) args.UsageError("unknown command '" + pos[0] + "'");
  control::Request req;
  req.command = spec->name;
  req.args.assign(pos.begin() + 1, pos.end());
  if (req.args.size() < spec->min_args || req.args.size() > spec->max_args)
    args.UsageError(std::string("usage: ubcache ctl ") + spec->name + (*spec->args ? " " : "") + spec->args);
  req.device = args.Get("device");
  req.json = args.Has("json");
  for (const std::string& t : req.args)
    if (!control::IsToken(t)) args.UsageError("'" + t + "': arguments are 1-255 printable characters without spaces");
  if (!req.device.empty() && !control::IsToken(req.device)) args.UsageError("--device: not a valid export name");

  std::string path = args.Has("control") ? args.Get("control") : FindSocket();
  // flush/detach may take as long as writeback does (Ctrl-C stops waiting);
  // anything else answers at once or the daemon is wedged.
  const bool long_running = req.command == "flush" || req.command == "detach";
  const bool tty = isatty(STDERR_FILENO);
  bool progress_shown = false;
  auto reply = CallControl(path, req, long_running ? -1 : 30000, [&](const std::string& line) {
    std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", line.c_str());
    progress_shown = true;
  });
  if (progress_shown && tty) std::fputc('\n', stderr);
  if (!reply.ok()) {
    const Status& st = reply.status();
    bool unreachable = st.message().rfind("cannot reach", 0) == 0 || st.message().find("path too long") != std::string::npos;
    Die(unreachable ? 2 : 1, st.message() + (unreachable && st.code() != Status::Code::kPermission
                                                 ? " (is 'ubcache serve' running? see --control)"
                                                 : ""));
  }
  if (!reply->ok) {
    std::fprintf(stderr, "ubcache ctl: %s\n", reply->body.c_str());
    return 1;
  }
  std::fwrite(reply->body.data(), 1, reply->body.size(), stdout);
  return 0;
}

}  // namespace ubcache
