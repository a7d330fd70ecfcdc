// SPDX-License-Identifier: Apache-2.0
// ControlServer: the daemon's control socket and metrics listener.
//
// A Unix stream socket (mode 0600; every connection's SO_PEERCRED must be
// root or the daemon's own uid) speaks the protocol of protocol.h, and an
// optional TCP listener answers HTTP GET /metrics. Both run on one thread
// of their own, in a poll() loop with non-blocking sockets: a slow or
// malicious client can stall neither the I/O threads nor other clients for
// longer than one request takes to run, and requests read only lock-free
// state (attributes.h). Commands that change state or may take long (set,
// flush, detach, attach, trigger-gc: Controller::RunsLong) run on a second
// thread, one at a time, with its own Reactor for their synchronous I/O
// (superblock writes, flush); their progress and reply frames reach the
// connection through the poll loop, and that connection's later requests
// wait for them, so replies stay in request order while other clients'
// statistics reads are answered meanwhile.
//
// Thread safety: Start/Stop from the thread that owns the server. The poll
// thread and the worker share one lock, work_mu_ (the queue, and each
// queued job's frames and finished flag); nothing else is taken under it,
// and the worker runs a command without it, so the command may take any
// lock of the daemon's.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "control/controller.h"
#include "util/status.h"
#include "util/thread_annotations.h"

namespace ubcache::control {

struct ControlServerOptions {
  std::string socket_path;     // empty: no control socket
  std::string metrics_listen;  // "HOST:PORT" (IPv4 or localhost); empty: none
  // Refuse a socket path another live daemon listens on (true), or just log
  // and run without a control socket (false: the default path).
  bool socket_required = true;
  // The `stop` command (Controller::StopHook); null: refused.
  Controller::StopHook stop;
};

// /run/ubcache/<export>.sock
std::string DefaultSocketPath(const std::string& export_name);

class ControlServer {
 public:
  ControlServer(ControlServerOptions o, std::vector<Target> targets);
  ~ControlServer();

  // Binds the sockets and starts the thread.
  Status Start();
  // Stops the thread, closes every connection, removes the socket.
  void Stop();
  const std::string& socket_path() const { return socket_path_; }
  // The TCP port the metrics listener got (for "127.0.0.1:0").
  int metrics_port() const { return metrics_port_; }

  // How long requests took inside the daemon, from the complete request to
  // the reply queued (wall clock), and the control thread's CPU time over
  // its life (read once when it ends: a per-request CPU clock would cost two
  // system calls a request). Logged by Stop(); read after Stop() (or from
  // the control thread).
  struct Timing {
    uint64_t requests = 0;  // answered on the poll thread
    uint64_t long_commands = 0;
    uint64_t max_wall_ns = 0, thread_cpu_ns = 0;
    uint64_t wall_log2[64] = {};  // requests by floor(log2(wall ns))
    uint64_t WallPercentileNs(double p) const;
  };
  const Timing& timing() const { return timing_; }

 private:
  struct Conn;
  struct Job;
  void Loop();
  void WorkerLoop() EXCLUDES(work_mu_);
  void Accept(int lfd, bool http);
  void OnReadable(const std::shared_ptr<Conn>& c);
  // Runs the connection's buffered requests until one goes to the worker.
  void RunLines(const std::shared_ptr<Conn>& c);
  void HandleLine(const std::shared_ptr<Conn>& c, const std::string& line) EXCLUDES(work_mu_);
  // Moves the worker's frames to their connections; resumes finished ones.
  void CollectJobs() EXCLUDES(work_mu_);
  void HandleHttp(Conn& c);
  bool Flush(Conn& c);  // false: the connection is broken
  // Logs requests slower than 5 ms (`what` names them).
  void Record(uint64_t wall0, const std::string& what);

  ControlServerOptions o_;
  Controller controller_;
  std::string socket_path_;
  int unix_fd_ = -1;
  int http_fd_ = -1;
  int metrics_port_ = 0;
  int stop_fd_ = -1;
  int wake_fd_ = -1;                          // the worker's frames are ready
  std::vector<std::shared_ptr<Conn>> conns_;  // control thread only
  std::vector<std::shared_ptr<Job>> jobs_;    // control thread only: given to the worker, not yet collected
  Timing timing_;                             // control thread only
  std::thread thread_;
  // The worker's queue.
  Mutex work_mu_;
  CondVar work_cv_;
  std::deque<std::shared_ptr<Job>> queue_ GUARDED_BY(work_mu_);
  bool work_stop_ GUARDED_BY(work_mu_) = false;
  // Stop began: the command the worker runs gives up (a drain stops early).
  std::atomic<bool> stopping_{false};
  std::thread worker_;
};

}  // namespace ubcache::control
