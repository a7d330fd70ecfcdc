// SPDX-License-Identifier: Apache-2.0
#include "tools/listener_handover.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tools/service.h"
#include "util/log.h"

namespace ubcache {

namespace {

constexpr size_t kMaxListeners = 64;
constexpr int kKeeperPatienceMs = 10 * 60 * 1000;

// The keeper's abstract socket: one name per user and set of addresses, so
// only the daemon that listens on the same addresses finds it.
sockaddr_un KeeperAddress(const std::vector<std::string>& addresses, socklen_t* len) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    h = (h ^ '\n') * 0x100000001b3ull;
  };
  for (const std::string& a : addresses) mix(a);
  char name[80];
  int n = std::snprintf(name, sizeof name, "ubcache-listeners-%u-%016llx", static_cast<unsigned>(geteuid()),
                        static_cast<unsigned long long>(h));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path + 1, name, static_cast<size_t>(n));  // sun_path[0] == 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + static_cast<size_t>(n));
  return sa;
}

std::vector<int> FromServiceManager() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* count = std::getenv("LISTEN_FDS");
  std::vector<int> fds;
  if (pid == nullptr || count == nullptr || std::strtol(pid, nullptr, 10) != getpid()) return fds;
  long n = std::strtol(count, nullptr, 10);
  for (long i = 0; i < n && i < static_cast<long>(kMaxListeners); i++) fds.push_back(3 + static_cast<int>(i));
  // Not for anything this process might start.
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  if (!fds.empty()) UB_INFO("nbd: {} socket{} from the service manager", fds.size(), fds.size() == 1 ? "" : "s");
  return fds;
}

std::vector<int> FromKeeper(const std::vector<std::string>& addresses) {
  std::vector<int> fds;
  socklen_t len = 0;
  sockaddr_un sa = KeeperAddress(addresses, &len);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fds;
  if (connect(s, reinterpret_cast<sockaddr*>(&sa), len) < 0) {  // no keeper: a first start
    close(s);
    return fds;
  }
  ucred peer{};
  socklen_t pl = sizeof peer;
  pollfd p{s, POLLIN, 0};
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &peer, &pl) < 0 || peer.uid != geteuid()) {
    UB_WARN("nbd: the listening-socket keeper is not this user's: ignored");
  } else if (poll(&p, 1, 10000) <= 0) {
    UB_WARN("nbd: the keeper of the previous daemon's listening sockets did not answer: binding anew");
  } else {
    char byte;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxListeners)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    if (recvmsg(s, &msg, MSG_CMSG_CLOEXEC) > 0) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          fds.push_back(fd);
        }
      }
      UB_INFO("nbd: {} listening socket{} kept since the previous daemon stopped", fds.size(),
              fds.size() == 1 ? "" : "s");
    }
  }
  close(s);
  return fds;
}

}  // namespace

std::vector<int> InheritedListeners(const std::vector<std::string>& addresses) {
  std::vector<int> fds = FromServiceManager();
  return fds.empty() ? FromKeeper(addresses) : fds;
}

bool StoreListeners(const std::vector<int>& fds) {
  if (fds.empty()) return false;
  return NotifyServiceManager("FDSTORE=1\nFDNAME=nbd", fds);
}

void KeepListeners(const std::vector<int>& fds, const std::vector<std::string>& addresses) {
  if (fds.empty()) return;
  auto close_all = [&fds] {
    for (int fd : fds) close(fd);
  };
  if (fds.size() > kMaxListeners) {
    UB_WARN("nbd: more than {} listening sockets: closed, not kept", kMaxListeners);
    close_all();
    return;
  }
  socklen_t len = 0;
  sockaddr_un sa = KeeperAddress(addresses, &len);
  // Bound before the fork: the next daemon may start the moment this one
  // exits, and must find the keeper already there.
  int hs = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (hs < 0 || bind(hs, reinterpret_cast<sockaddr*>(&sa), len) < 0 || listen(hs, 4) < 0) {
    UB_WARN("nbd: cannot keep the listening sockets for the next start ({}): closed", std::strerror(errno));
    if (hs >= 0) close(hs);
    close_all();
    return;
  }
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  // Everything the keeper needs is made here: after fork() it only makes
  // system calls (the parent's other threads may hold locks it must not
  // wait for).
  std::vector<int> kept = fds;
  kept.push_back(hs);
  std::sort(kept.begin(), kept.end());
  char byte = 'L';
  iovec iov{&byte, 1};
  std::vector<char> control;
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  AttachFds(&msg, &control, fds);
  const uid_t uid = geteuid();

  pid_t pid = fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // SIGTERM ends it
    setsid();
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    // Nothing else of the daemon stays open here (its devices least of all).
    unsigned lo = 3;
    for (int fd : kept) {
      if (static_cast<unsigned>(fd) > lo) close_range(lo, static_cast<unsigned>(fd) - 1, 0);
      lo = std::max(lo, static_cast<unsigned>(fd) + 1);
    }
    close_range(lo, ~0u, 0);
    while (true) {
      pollfd p{hs, POLLIN, 0};
      if (poll(&p, 1, kKeeperPatienceMs) == 0) _exit(0);
      int conn = accept4(hs, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      ucred peer{};
      socklen_t pl = sizeof peer;
      if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &pl) == 0 && peer.uid == uid &&
          sendmsg(conn, &msg, MSG_NOSIGNAL) == 1)
        _exit(0);
      close(conn);
    }
  }
  if (devnull >= 0) close(devnull);
  close(hs);
  close_all();
  if (pid < 0) {
    UB_WARN("nbd: cannot fork a keeper for the listening sockets ({}): closed", std::strerror(errno));
    return;
  }
  UB_INFO("nbd: the listening sockets stay open in process {}, connections waiting in them, until the next "
          "start takes them (10 minutes at most)", pid);
}

}  // namespace ubcache
