// ubcache ctl: one request to a running daemon's control socket (see
// doc/control.md), its reply on stdout. Exit status: 0 ok, 1 the daemon
// answered with an error, 2 usage error or no daemon to talk to.
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
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
            "flushes, detaches or attaches a device. Exit status: 0 ok, 1 the daemon\n"
            "refused or failed the request, 2 usage error or socket unreachable.");
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
  sockaddr_un a{};
  if (path.size() >= sizeof a.sun_path) Die(2, "--control " + path + ": path too long");
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Die(2, std::string("socket: ") + std::strerror(errno));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) {
    int err = errno;
    Die(2, "cannot reach the daemon at " + path + ": " + std::strerror(err) +
               (err == EACCES ? " (only root and the daemon's user may use it)"
                              : " (is 'ubcache serve' running? see --control)"));
  }
  signal(SIGPIPE, SIG_IGN);
  std::string line = control::EncodeRequest(req);
  for (size_t off = 0; off < line.size();) {
    ssize_t n = send(fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    // A daemon that refuses us answers and closes before reading: its
    // error frame is waiting to be read below.
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) break;
    if (n < 0) Die(2, "sending to " + path + ": " + std::strerror(errno));
    off += static_cast<size_t>(n);
  }
  // flush/detach may take as long as writeback does (Ctrl-C stops waiting);
  // anything else answers at once or the daemon is wedged.
  const bool long_running = req.command == "flush" || req.command == "detach";
  const bool tty = isatty(STDERR_FILENO);
  control::FrameReader reader;
  bool progress_shown = false;
  for (;;) {
    auto frame = reader.Pop();
    if (!frame.ok()) Die(1, path + ": " + frame.status().message());
    if (*frame) {
      const control::Frame& f = **frame;
      if (f.kind == FrameKind::kProgress) {
        std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", f.body.c_str());
        progress_shown = true;
        continue;
      }
      if (progress_shown && tty) std::fputc('\n', stderr);
      if (f.kind == FrameKind::kError) {
        std::fprintf(stderr, "ubcache ctl: %s\n", f.body.c_str());
        return 1;
      }
      std::fwrite(f.body.data(), 1, f.body.size(), stdout);
      return 0;
    }
    pollfd p{fd, POLLIN, 0};
    int rc = poll(&p, 1, long_running ? -1 : 30000);
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) Die(1, path + ": no reply within 30 s");
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Die(1, path + ": the daemon closed the connection without a reply");
    reader.Feed(buf, static_cast<size_t>(n));
  }
}

}  // namespace ubcache
