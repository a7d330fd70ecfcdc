// SPDX-License-Identifier: Apache-2.0
// ctl_poller — polls a ubcache control socket like a metrics scraper:
// RATE queries a second, cycling through COMMANDS, until SIGTERM/SIGINT or
// --seconds; one connection for all of them, or (--connect-each) one per
// query as `ubcache ctl` does. A query's latency runs from connect (or
// send) to its final frame. Prints one JSON object: count, errors, rate,
// p50_ms, p99_ms, max_ms.
//
// --alternate S polls only in the even S-second periods of the wall clock
// (floor(unix time / S) even) and is silent in the odd ones, so that one
// long benchmark run measures both sides, second by second, under the same
// drifting load; its log is matched to the periods by unix time (fio's
// log_unix_epoch). rate then counts the polling periods' time only.
//
// It is compiled so that the poller's own CPU time — on a 2-CPU machine it
// competes with fio and the daemon — stays a small part of what the stall
// benchmark measures (a Python poller spent ~600 us of CPU per query), and
// it asks for a short scheduler slice, as a latency-sensitive scraper
// would, so that its latencies measure the daemon rather than its own
// wait for a CPU that fio and the reactors keep busy.
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "util/thread.h"

namespace {

volatile sig_atomic_t g_stop = 0;

// Wall-clock seconds: --alternate's periods are unix time, which the
// benchmark's own log (fio's log_unix_epoch) also records.
double NowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void SleepUntil(double t) {
  timespec ts{static_cast<time_t>(t), static_cast<long>((t - static_cast<double>(static_cast<time_t>(t))) * 1e9)};
  while (!g_stop && clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

int Connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends one request and reads frames ("KIND LENGTH\n" + body) until one
// that is not progress. True when it is "ok".
bool Query(int fd, const std::string& req, std::string& buf) {
  for (size_t sent = 0; sent < req.size();) {
    ssize_t n = send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  buf.clear();
  char chunk[65536];
  for (;;) {
    size_t nl = buf.find('\n');
    if (nl != std::string::npos) {
      size_t sp = buf.find(' ');
      if (sp == std::string::npos || sp > nl) return false;
      size_t end = nl + 1 + std::strtoull(buf.c_str() + sp + 1, nullptr, 10);
      if (buf.size() >= end) {
        bool progress = buf.compare(0, sp, "progress") == 0;
        bool ok = buf.compare(0, sp, "ok") == 0;
        buf.erase(0, end);
        if (!progress) return ok;
        continue;
      }
    }
    ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
  }
}

[[noreturn]] void Usage() {
  std::fprintf(stderr,
               "usage: ctl_poller SOCKET [--rate 100] [--seconds N] [--commands priority-stats,stats,metrics] "
               "[--connect-each] [--alternate S]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Usage();
  std::string path = argv[1];
  double rate = 100, seconds = 0, alternate = 0;
  bool connect_each = false;
  std::string commands = "priority-stats,stats,metrics";
  for (int i = 2; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--connect-each") {
      connect_each = true;
    } else if (i + 1 < argc && a == "--rate") {
      rate = std::atof(argv[++i]);
    } else if (i + 1 < argc && a == "--seconds") {
      seconds = std::atof(argv[++i]);
    } else if (i + 1 < argc && a == "--alternate") {
      alternate = std::atof(argv[++i]);
    } else if (i + 1 < argc && a == "--commands") {
      commands = argv[++i];
    } else {
      Usage();
    }
  }
  if (rate <= 0 || alternate < 0) Usage();
  std::vector<std::string> reqs;
  for (size_t pos = 0; pos <= commands.size();) {
    size_t comma = std::min(commands.find(',', pos), commands.size());
    if (comma > pos) reqs.push_back("ubcache-ctl/1 " + commands.substr(pos, comma - pos) + "\n");
    pos = comma + 1;
  }
  if (reqs.empty()) Usage();

  ubcache::RequestShortSlice(200'000);
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop = 1; };
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  std::vector<double> lat;
  lat.reserve(1 << 16);
  size_t errors = 0;
  std::string buf;
  int fd = -1;
  const double period = 1.0 / rate, start = NowSeconds();
  double sched = start, polled = 0;  // this polling stretch's start; time polled before it
  size_t k = 0;                      // queries since sched
  for (size_t n = 0; !g_stop && (seconds <= 0 || NowSeconds() - start < seconds); n++) {
    if (alternate > 0) {
      double now = NowSeconds();
      auto p = static_cast<long long>(now / alternate);
      if (p % 2 != 0) {  // a silent period: sleep to the next polling one
        polled += std::max(0.0, static_cast<double>(p) * alternate - sched);
        sched = static_cast<double>(p + 1) * alternate;
        k = 0;
        SleepUntil(sched);
        continue;
      }
    }
    double t0 = NowSeconds();
    if (fd < 0) fd = Connect(path);
    bool ok = fd >= 0 && Query(fd, reqs[n % reqs.size()], buf);
    lat.push_back((NowSeconds() - t0) * 1000);
    if (!ok) errors++;
    if (fd >= 0 && (connect_each || !ok)) {
      close(fd);
      fd = -1;
    }
    // Fixed schedule: a slow query does not slow the rate down.
    SleepUntil(sched + static_cast<double>(++k) * period);
  }
  double elapsed = alternate > 0 ? polled + std::max(0.0, NowSeconds() - sched) : NowSeconds() - start;
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) {
    return lat.empty() ? 0.0 : lat[std::min(lat.size() - 1, static_cast<size_t>(p * static_cast<double>(lat.size())))];
  };
  std::printf(
      "{\"count\": %zu, \"errors\": %zu, \"rate\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f}\n",
      lat.size(), errors, static_cast<double>(lat.size()) / elapsed, pct(0.5), pct(0.99), lat.empty() ? 0.0 : lat.back());
  return 0;
}
