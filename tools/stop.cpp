// SPDX-License-Identifier: Apache-2.0
// ubcache stop: stops a running daemon, named as `ubcache status` lists it
// (its control socket), and waits until it has exited. Without --delete it
// is the same as SIGTERM: a daemon started with --recover auto (the unit)
// leaves its ublk devices in place, their I/O held, for the next start;
// with --delete the devices go too. Exit status: 0 stopped, 1 the daemon
// refused or did not exit in time, 2 usage error or no such daemon.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "control/protocol.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/ctl_client.h"
#include "util/clock.h"
#include "util/size.h"

namespace ubcache {

namespace {

// True while `pid` runs: a zombie (exited, its parent has not waited yet)
// has stopped.
bool Running(pid_t pid) {
  if (kill(pid, 0) != 0 && errno != EPERM) return false;
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return true;
  char state = '?';
  int n = std::fscanf(f, "%*d (%*[^)]) %c", &state);
  std::fclose(f);
  return !(n == 1 && state == 'Z');
}

}  // namespace

int StopMain(int argc, char** argv) {
  Args args("stop", "[--delete] [--dir DIR] [--timeout SECONDS] (NAME | --control PATH)",
            "Stops the running 'ubcache serve' NAME (its control socket DIR/NAME.sock, as\n"
            "'ubcache status' lists it) and waits until it has exited. Without --delete\n"
            "this is SIGTERM: a daemon started with --recover auto (ubcache@.service)\n"
            "leaves its /dev/ublkbN devices in place with their I/O held, and the next\n"
            "start takes them over with the cache warm (an upgrade, a restart); any\n"
            "other daemon deletes them. With --delete the devices are deleted in either\n"
            "case: the explicit way to take them away. Exit status: 0 stopped, 1 the\n"
            "daemon refused or was still running after --timeout, 2 usage error or no\n"
            "such daemon.");
  args.Flag("delete", "delete the daemon's ublk devices (a mounted filesystem on them gets I/O errors)")
      .Option("dir", "DIR", "where the daemons' control sockets are", "/run/ubcache")
      .Option("control", "PATH", "the daemon's control socket (instead of NAME)")
      .Option("timeout", "SECONDS", "how long to wait for the daemon to exit (0: for ever)", "600");
  args.Parse(argc - 1, argv + 1);
  const auto& pos = args.positional();
  if (pos.size() > 1) args.UsageError("unexpected argument '" + pos[1] + "'");
  if (pos.empty() == !args.Has("control")) args.UsageError("name one daemon: NAME or --control PATH");
  auto timeout = ParseUint(args.Get("timeout"), 0, 1u << 30, "--timeout");
  if (!timeout.ok()) args.UsageError(timeout.status().message());
  std::string path = args.Has("control") ? args.Get("control") : args.Get("dir") + "/" + pos[0] + ".sock";

  control::Request req;
  req.command = "stop";
  if (args.Has("delete")) req.args.push_back("delete");
  auto reply = CallControl(path, req, 30000);
  if (!reply.ok()) Die(2, reply.status().message() + " (see 'ubcache status')");
  if (!reply->ok) {
    std::fprintf(stderr, "ubcache stop: %s\n", reply->body.c_str());
    return 1;
  }
  std::string what = reply->body;
  if (!what.empty() && what.back() == '\n') what.pop_back();
  // "pid N stopping; ...": the daemon runs on this machine, so its exit is
  // seen as its pid going away.
  pid_t pid = what.rfind("pid ", 0) == 0 ? static_cast<pid_t>(std::strtol(what.c_str() + 4, nullptr, 10)) : 0;
  std::fprintf(stderr, "ubcache stop: %s\n", what.c_str());
  uint64_t deadline = *timeout ? NowNanos() + *timeout * 1'000'000'000ull : 0;
  while (pid > 0 && Running(pid)) {
    if (deadline && NowNanos() > deadline) {
      std::fprintf(stderr, "ubcache stop: pid %d still running after %s s\n", static_cast<int>(pid),
                   args.Get("timeout").c_str());
      return 1;
    }
    usleep(20000);
  }
  std::fprintf(stderr, "ubcache stop: stopped\n");
  return 0;
}

}  // namespace ubcache
