// SPDX-License-Identifier: Apache-2.0
#include "frontend/nbd_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <future>

#include "frontend/nbd_connection.h"
#include "frontend/nbd_proto.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/size.h"
#include "util/thread.h"

namespace ubcache {

NbdServer::NbdServer(std::vector<NbdExport> exports, NbdServerOptions options)
    : exports_(std::move(exports)), options_(std::move(options)) {
  for (const NbdExport& e : exports_) {
    nbd::ExportInfo info;
    info.name = e.name;
    info.description = e.description;
    info.size = e.device->size();
    bool ro = e.read_only || e.device->read_only();
    info.flags = nbd::kFlagHasFlags | nbd::kFlagSendFlush | nbd::kFlagSendFua |
                 nbd::kFlagSendTrim | nbd::kFlagSendWriteZeroes | nbd::kFlagSendFastZero |
                 nbd::kFlagSendCache | nbd::kFlagSendDf | nbd::kFlagCanMultiConn |
                 (ro ? nbd::kFlagReadOnly : 0);
    info.min_block = e.device->logical_block_size();
    info.preferred_block = std::max(e.preferred_block, info.min_block);
    info.max_block = nbd::kMaxPayload;
    infos_.push_back(std::move(info));
  }
}

NbdServer::~NbdServer() {
  for (Reactor* r : reactors_) r->Stop();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  for (auto& l : listeners_) {
    if (l.fd >= 0) close(l.fd);
    if (l.is_unix) unlink(l.unix_path.c_str());
  }
  if (stop_fd_ >= 0) close(stop_fd_);
  if (signal_fd_ >= 0) close(signal_fd_);
}

namespace {

// True when `fd` is a listening stream socket bound to `want`: the same
// Unix path, or the same family, address and port.
bool BoundTo(int fd, const sockaddr* want, socklen_t want_len) {
  sockaddr_storage got{};
  socklen_t len = sizeof got;
  int listening = 0;
  socklen_t ll = sizeof listening;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&got), &len) < 0 ||
      getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) < 0 || !listening ||
      got.ss_family != want->sa_family)
    return false;
  switch (want->sa_family) {
    case AF_UNIX: {
      const auto* a = reinterpret_cast<const sockaddr_un*>(&got);
      const auto* b = reinterpret_cast<const sockaddr_un*>(want);
      return len > offsetof(sockaddr_un, sun_path) && want_len > offsetof(sockaddr_un, sun_path) &&
             std::strncmp(a->sun_path, b->sun_path, sizeof a->sun_path) == 0;
    }
    case AF_INET: {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&got);
      const auto* b = reinterpret_cast<const sockaddr_in*>(want);
      return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
    }
    case AF_INET6: {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&got);
      const auto* b = reinterpret_cast<const sockaddr_in6*>(want);
      return a->sin6_port == b->sin6_port && std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0;
    }
    default:
      return false;
  }
}

}  // namespace

int NbdServer::TakeInherited(const sockaddr* sa, socklen_t len) {
  auto& in = options_.inherited;
  for (auto it = in.begin(); it != in.end(); ++it) {
    if (BoundTo(*it, sa, len)) {
      int fd = *it;
      in.erase(it);
      return fd;
    }
  }
  return -1;
}

Status NbdServer::Listen(const std::string& address) {
  Listener l;
  l.address = address;
  if (address.rfind("unix:", 0) == 0) {
    std::string path = address.substr(5);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof sa.sun_path)
      return Status::InvalidArgument("--nbd " + address + ": bad socket path");
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    if (int fd = TakeInherited(reinterpret_cast<sockaddr*>(&sa), sizeof sa); fd >= 0) {
      UB_INFO("nbd: {}: listening socket taken over from the previous server", address);
      l.fd = fd;
      l.is_unix = true;
      l.unix_path = path;
      listeners_.push_back(std::move(l));
      return Status::OK();
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::FromErrno(errno, "socket");
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) {
      int e = errno;
      if (e != EADDRINUSE) {
        close(fd);
        return Status::FromErrno(e, "--nbd " + address);
      }
      // A socket file left by a dead server is removed; a live one is not.
      int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      bool live = connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
      close(probe);
      if (live) {
        close(fd);
        return Status::Busy("--nbd " + address + ": another server is listening there");
      }
      unlink(path.c_str());
      if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) {
        e = errno;
        close(fd);
        return Status::FromErrno(e, "--nbd " + address);
      }
    }
    l.fd = fd;
    l.is_unix = true;
    l.unix_path = path;
  } else if (address.rfind("tcp:", 0) == 0) {
    std::string hp = address.substr(4);
    auto colon = hp.rfind(':');
    if (colon == std::string::npos)
      return Status::InvalidArgument("--nbd " + address + ": expected tcp:HOST:PORT");
    std::string host = hp.substr(0, colon), port = hp.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0)
      return Status::InvalidArgument("--nbd " + address + ": " + gai_strerror(rc));
    if (int fd = TakeInherited(res->ai_addr, res->ai_addrlen); fd >= 0) {
      freeaddrinfo(res);
      UB_INFO("nbd: {}: listening socket taken over from the previous server", address);
      l.fd = fd;
      listeners_.push_back(std::move(l));
      return Status::OK();
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) < 0) {
      int e = errno;
      freeaddrinfo(res);
      if (fd >= 0) close(fd);
      return Status::FromErrno(e, "--nbd " + address);
    }
    freeaddrinfo(res);
    l.fd = fd;
  } else {
    return Status::InvalidArgument("--nbd " + address + ": expected unix:PATH or tcp:HOST:PORT");
  }
  if (listen(l.fd, 128) < 0) {
    int e = errno;
    close(l.fd);
    return Status::FromErrno(e, "listen " + address);
  }
  listeners_.push_back(std::move(l));
  return Status::OK();
}

Status NbdServer::Start() {
  if (exports_.empty()) return Status::InvalidArgument("nothing to serve");
  if (options_.listen.empty()) return Status::InvalidArgument("no --nbd address to listen on");
  if (options_.tls != nbd::TlsPolicy::kOff && !options_.tls_credentials)
    return Status::InvalidArgument("TLS needs credentials (--tls-certificates or --tls-psk)");
  // Signals arrive through a signalfd read by Run(); every thread that
  // starts after this inherits the blocked mask.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (signal_fd_ < 0 || stop_fd_ < 0) return Status::FromErrno(errno, "signalfd/eventfd");

  for (int fd : options_.inherited) fcntl(fd, F_SETFD, FD_CLOEXEC);
  Status listening;
  for (const std::string& a : options_.listen) {
    listening = Listen(a);
    if (!listening.ok()) break;
  }
  for (int fd : options_.inherited) {
    UB_WARN("nbd: a listening socket from the previous server matches no --nbd address: closed");
    close(fd);
  }
  options_.inherited.clear();
  UB_RETURN_IF_ERROR(listening);

  unsigned n = options_.threads ? options_.threads : std::max(1u, std::thread::hardware_concurrency());
  // Each ring is created on the thread that will use it (the kernel ties a
  // SINGLE_ISSUER ring to its creator).
  for (unsigned i = 0; i < n; i++) {
    auto made = std::make_shared<std::promise<Result<Reactor*>>>();
    auto f = made->get_future();
    threads_.emplace_back([made, i] {
      SetThreadName("ub-reactor" + std::to_string(i));
      MarkServingThread(true);  // serves clients: never waits (util/thread.h)
      auto r = Reactor::Create();
      if (!r.ok()) {
        made->set_value(r.status());
        return;
      }
      std::unique_ptr<Reactor> owned = std::move(r).value();
      Reactor* rp = owned.get();
      made->set_value(rp);
      rp->Run();
      // The reactor is destroyed on its own thread, after Run() returns.
      owned.reset();
    });
    auto r = f.get();
    if (!r.ok()) return r.status();
    reactors_.push_back(*r);
  }
  for (size_t i = 0; i < exports_.size(); i++) {
    UB_INFO("serving export '{}' ({}, {}{}) on {}", infos_[i].name, FormatSize(infos_[i].size),
            exports_[i].device->Describe(), (infos_[i].flags & nbd::kFlagReadOnly) ? ", read-only" : "",
            [&] {
              std::string s;
              for (auto& l : listeners_) s += (s.empty() ? "" : ", ") + l.address;
              return s;
            }());
  }
  UB_INFO("{} reactor thread{}; SIGTERM or Ctrl-C stops", n, n == 1 ? "" : "s");
  return Status::OK();
}

void NbdServer::Stop() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t w = write(stop_fd_, &one, sizeof one);
}

void NbdServer::ConnectionClosed() { connections_.fetch_sub(1, std::memory_order_acq_rel); }

void NbdServer::Accept(Listener& l) {
  sockaddr_storage ss;
  socklen_t len = sizeof ss;
  int fd = accept4(l.fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
      UB_WARN("accept on {}: {}", l.address, std::strerror(errno));
    return;
  }
  std::string peer = l.address;
  if (!l.is_unix) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
    else if (ss.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, host, sizeof host);
    peer = std::string("tcp:") + host;
  }
  // Large socket buffers let a whole batch of replies leave in one sendmsg.
  int bufsize = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
  connections_.fetch_add(1, std::memory_order_acq_rel);
  Reactor* r = reactors_[next_reactor_++ % reactors_.size()];
  r->Post([this, fd, peer] {
    auto* c = new NbdConnection(this, fd, peer);
    c->Start();
  });
}

Status NbdServer::Run() {
  std::vector<pollfd> fds;
  for (auto& l : listeners_) fds.push_back({l.fd, POLLIN, 0});
  fds.push_back({signal_fd_, POLLIN, 0});
  fds.push_back({stop_fd_, POLLIN, 0});
  while (true) {
    int n = poll(fds.data(), fds.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "poll");
    }
    if (fds[listeners_.size()].revents & POLLIN) {
      signalfd_siginfo si;
      [[maybe_unused]] ssize_t r = read(signal_fd_, &si, sizeof si);
      UB_INFO("{}: stopping: no new connections, finishing requests in flight",
              strsignal(static_cast<int>(si.ssi_signo)));
      break;
    }
    if (fds[listeners_.size() + 1].revents & POLLIN) {
      UB_INFO("stopping: no new connections, finishing requests in flight");
      break;
    }
    for (size_t i = 0; i < listeners_.size(); i++)
      if (fds[i].revents & POLLIN) Accept(listeners_[i]);
  }
  return Drain();
}

Status NbdServer::Drain() {
  shutting_down_.store(true, std::memory_order_release);
  // Kept for a hand-over: connections queue in the backlog, unanswered,
  // until the next server accepts them.
  if (!options_.keep_listeners) {
    for (auto& l : listeners_) {
      close(l.fd);
      l.fd = -1;
      if (l.is_unix) unlink(l.unix_path.c_str());
    }
  }
  for (auto& r : reactors_) {
    r->Post([] {
      auto list = NbdConnection::OnThisThread();  // a copy: shutdown edits the list
      for (NbdConnection* c : list) c->BeginShutdown();
    });
  }
  uint64_t start = NowNanos();
  uint64_t last_note = start;
  bool second_signal = false;
  while (connections_.load(std::memory_order_acquire) > 0) {
    pollfd p{signal_fd_, POLLIN, 0};
    if (poll(&p, 1, 10) > 0) {
      signalfd_siginfo si;
      [[maybe_unused]] ssize_t r = read(signal_fd_, &si, sizeof si);
      second_signal = true;
    }
    uint64_t now = NowNanos();
    if (second_signal || now - start > 30'000'000'000ull) {
      UB_WARN("{} connection(s) still busy; exiting without waiting for them",
              connections_.load());
      break;
    }
    if (now - last_note > 1'000'000'000ull) {
      UB_INFO("waiting for {} connection(s) to finish", connections_.load());
      last_note = now;
    }
  }
  // Make every acknowledged write durable before exiting.
  Status result;
  for (const NbdExport& e : exports_) {
    if (e.read_only || e.device->read_only()) continue;
    std::promise<Status> p;
    auto f = p.get_future();
    reactors_[0]->Post([&e, &p] { e.device->Flush([&p](Status st) { p.set_value(std::move(st)); }); });
    Status st = f.get();
    if (!st.ok()) {
      UB_ERROR("flush of export '{}' failed: {}", e.name, st.ToString());
      if (result.ok()) result = st;
    }
  }
  for (Reactor* r : reactors_) r->Stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  reactors_.clear();
  UB_INFO("stopped");
  return result;
}

std::vector<int> NbdServer::listener_fds() const {
  std::vector<int> fds;
  for (const auto& l : listeners_)
    if (l.fd >= 0) fds.push_back(l.fd);
  return fds;
}

std::vector<int> NbdServer::TakeListeners() {
  std::vector<int> fds = listener_fds();
  listeners_.clear();  // neither closed nor unlinked by the destructor
  return fds;
}

}  // namespace ubcache
