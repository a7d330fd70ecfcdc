// SPDX-License-Identifier: Apache-2.0
// Running serve under a service manager: systemd's notification protocol
// (sd_notify(3): a datagram of KEY=VALUE lines to the socket named by
// $NOTIFY_SOCKET — READY=1, STATUS=..., RELOADING=1, STOPPING=1) and SIGHUP
// as "re-read your configuration". Without $NOTIFY_SOCKET the notifications
// go nowhere and SIGHUP still reloads.
//
// Thread safety: Start() and Stop() from one thread; the hooks run on the
// loop's own thread, one at a time.
#pragma once

#include <sys/socket.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "util/status.h"

namespace ubcache {

// Sends `state` (KEY=VALUE lines), and `fds` with it (FDSTORE=1), to the
// service manager; false when none listens or the datagram could not be
// sent.
bool NotifyServiceManager(const std::string& state, const std::vector<int>& fds = {});
// Attaches `fds` (non-empty) to `msg` as one SCM_RIGHTS message, in
// `control`, which must outlive the sendmsg.
void AttachFds(msghdr* msg, std::vector<char>* control, const std::vector<int>& fds);

class ServiceLoop {
 public:
  struct Hooks {
    std::function<std::string()> status;  // a one-line summary for STATUS=
    std::function<void()> reload;         // on SIGHUP
  };
  // SIGHUP must be blocked in every thread before Start (as serve blocks
  // SIGINT and SIGTERM), so only the loop sees it.
  ServiceLoop(Hooks hooks, unsigned status_interval_ms = 5000)
      : hooks_(std::move(hooks)), interval_ms_(status_interval_ms) {}
  ~ServiceLoop() { Stop(); }

  // READY=1 with the first STATUS=, then a thread that refreshes STATUS=
  // every interval and reloads on each SIGHUP (RELOADING=1 ... READY=1).
  Status Start();
  // STOPPING=1; ends the thread.
  void Stop();

 private:
  void Loop();

  Hooks hooks_;
  unsigned interval_ms_;
  int signal_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace ubcache
