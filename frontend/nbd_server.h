// SPDX-License-Identifier: Apache-2.0
// NbdServer: serves BlockDevices as NBD exports to any NBD client (kernel
// nbd-client, qemu, libnbd, fio's nbd engine, nbdfuse).
//
// Threads: one acceptor (the caller of Run()) and N reactor threads, each
// with its own io_uring. An accepted connection is handed to one reactor
// and lives there until it closes: its socket I/O and its device I/O are
// all submitted on that reactor's ring, so requests take no lock shared
// with other connections. Replies go out as requests complete, out of
// order, batched into one sendmsg per reactor turn.
//
// The frontend holds no policy: it validates the protocol and maps
// commands onto BlockDevice calls. The device may be a plain backing
// device (passthrough) or the cache.
//
// A FLUSH on any connection flushes the shared device, which covers writes
// acknowledged on every connection: hence CAN_MULTI_CONN.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/block_device.h"
#include "frontend/nbd_handshake.h"
#include "frontend/tls_session.h"
#include "util/status.h"

namespace ubcache {

struct NbdExport {
  std::string name;
  std::string description;
  BlockDevice* device = nullptr;  // not owned; outlives the server
  bool read_only = false;
  uint32_t preferred_block = 4096;
};

struct NbdServerOptions {
  // "unix:PATH" or "tcp:HOST:PORT"; at least one.
  std::vector<std::string> listen;
  unsigned threads = 0;  // 0: one per core
  // NBD_OPT_STARTTLS (nbd_handshake.h); credentials are needed unless off.
  nbd::TlsPolicy tls = nbd::TlsPolicy::kOff;
  std::shared_ptr<TlsCredentials> tls_credentials;
  // Listening sockets a previous server left (an upgrade, a restart;
  // tools/listener_handover.h): an address bound by one of them takes it
  // instead of binding anew, so connections queued in its backlog meanwhile
  // are accepted. The server owns them from Start(); unused ones it closes.
  std::vector<int> inherited;
  // Run() leaves the listening sockets open and bound (their path is not
  // removed) for TakeListeners(): the next server's, through a hand-over.
  bool keep_listeners = false;
};

class NbdServer {
 public:
  NbdServer(std::vector<NbdExport> exports, NbdServerOptions options);
  ~NbdServer();

  // Binds every listener and starts the reactor threads.
  Status Start();
  // Accepts connections until SIGINT/SIGTERM or Stop(); then stops
  // accepting, lets connections finish the requests they have in flight,
  // flushes every export and returns the flush's status.
  Status Run();
  // Any thread: make Run() return (as a signal would).
  void Stop();
  // The listening sockets (after Start()).
  std::vector<int> listener_fds() const;
  // After Run() with keep_listeners: the listening sockets, now the
  // caller's to hand over or close.
  std::vector<int> TakeListeners();

  // The sizes in these are the exports' at start; a connection reads the
  // device's own (it may have grown) for its handshake.
  const std::vector<nbd::ExportInfo>& export_infos() const { return infos_; }
  const std::vector<NbdExport>& exports() const { return exports_; }
  unsigned threads() const { return static_cast<unsigned>(reactors_.size()); }
  nbd::TlsPolicy tls_policy() const { return options_.tls; }
  const std::shared_ptr<TlsCredentials>& tls_credentials() const { return options_.tls_credentials; }

  // Connection bookkeeping, called by connections on their reactor.
  void ConnectionClosed();
  bool shutting_down() const { return shutting_down_.load(std::memory_order_acquire); }

 private:
  struct Listener {
    std::string address;
    int fd = -1;
    bool is_unix = false;
    std::string unix_path;
  };
  Status Listen(const std::string& address);
  // The inherited socket bound to `sa`, taken out of options_.inherited; -1: none.
  int TakeInherited(const sockaddr* sa, socklen_t len);
  void Accept(Listener& l);
  Status Drain();

  std::vector<NbdExport> exports_;
  std::vector<nbd::ExportInfo> infos_;
  NbdServerOptions options_;
  std::vector<Listener> listeners_;
  std::vector<Reactor*> reactors_;  // each owned by its thread in threads_
  std::vector<std::thread> threads_;
  int stop_fd_ = -1;    // eventfd: Stop()
  int signal_fd_ = -1;  // SIGINT, SIGTERM
  unsigned next_reactor_ = 0;
  std::atomic<int64_t> connections_{0};
  std::atomic<bool> shutting_down_{false};
};

}  // namespace ubcache
