// SPDX-License-Identifier: Apache-2.0
// ubcache: one binary, subcommands in the manner of git and bcachefs.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/args.h"
#include "tools/commands.h"
#include "util/log.h"

// The version is the CMake project's (project(ubcache VERSION ...)),
// passed by tools/CMakeLists.txt; debian/changelog carries the same.
#ifndef UBCACHE_VERSION
#error "UBCACHE_VERSION is not defined: tools/CMakeLists.txt passes the project's VERSION"
#endif

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int, char**);
};

const Command kCommands[] = {
    {"serve", "serve a device (or a cache in front of one) over NBD and/or as ublk /dev/ublkbN", ubcache::ServeMain},
    {"format", "write a cache or backing superblock (bcache layout for backing)", ubcache::FormatMain},
    {"show-super", "print every field of a cache or backing superblock", ubcache::ShowSuperMain},
    {"forget-cache", "detach a backing device whose cache is lost, saying what it holds", ubcache::ForgetCacheMain},
    {"ctl", "control a running serve: knobs, statistics, metrics, detach/attach", ubcache::CtlMain},
    {"status", "every running serve on this machine and its exports, at a glance", ubcache::StatusMain},
    {"stop", "stop a running serve; --delete also deletes its ublk devices (else an upgrade keeps them)", ubcache::StopMain},
    {"probe", "measure a device: random IOPS, sequential MB/s, latency", ubcache::ProbeMain},
};

void PrintHelp(FILE* out) {
  std::fprintf(out,
               "ubcache %s — a user-space, bcache-style SSD cache for block devices\n\n"
               "Usage: ubcache [--log-level LEVEL | -v] COMMAND [OPTIONS]\n\nCommands:\n",
               UBCACHE_VERSION);
  for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
  std::fprintf(out,
               "\nGlobal options:\n"
               "  --log-level LEVEL  trace, debug, info, warn, error, off (default: info)\n"
               "  -v                 same as --log-level debug (both also after COMMAND)\n"
               "  --version          print the version\n"
               "  -h, --help         this help; 'ubcache COMMAND --help' for a command\n");
}


// -v / --log-level LEVEL / --log-level=LEVEL at argv[*i]: applies it, moves
// *i past it and returns true.
bool LogOption(int argc, char** argv, int* i) {
  std::string a = argv[*i];
  if (a == "-v") {
    (void)ubcache::SetLogLevel("debug");
  } else if (a == "--log-level" || a.rfind("--log-level=", 0) == 0) {
    std::string level;
    if (a == "--log-level") {
      if (*i + 1 >= argc) ubcache::Die(2, "--log-level needs a value");
      level = argv[++*i];
    } else {
      level = a.substr(12);
    }
    ubcache::Status st = ubcache::SetLogLevel(level);
    if (!st.ok()) ubcache::Die(2, st.message());
  } else {
    return false;
  }
  ++*i;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  ubcache::InitLogging();
  int i = 1;
  while (i < argc && argv[i][0] == '-') {
    std::string a = argv[i];
    if (a == "--version") {
      std::printf("ubcache %s\n", UBCACHE_VERSION);
      return 0;
    } else if (a == "-h" || a == "--help") {
      PrintHelp(stdout);
      return 0;
    } else if (!LogOption(argc, argv, &i)) {
      std::fprintf(stderr, "ubcache: unknown option '%s'\n\n", argv[i]);
      PrintHelp(stderr);
      return 2;
    }
  }
  if (i >= argc) {
    PrintHelp(stderr);
    return 2;
  }
  // The log options are global but also taken after the command
  // ('ubcache serve ... -v'); the command never sees them.
  std::vector<char*> args{argv[i]};
  for (int j = i + 1; j < argc;)
    if (!LogOption(argc, argv, &j)) args.push_back(argv[j++]);
  args.push_back(nullptr);
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[i], c.name) == 0) return c.run(static_cast<int>(args.size() - 1), args.data());
  }
  std::fprintf(stderr, "ubcache: unknown command '%s' (see 'ubcache --help')\n", argv[i]);
  return 2;
}
