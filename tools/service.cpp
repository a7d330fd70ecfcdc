// SPDX-License-Identifier: Apache-2.0
#include "tools/service.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "backend/reactor.h"
#include "util/log.h"
#include "util/thread.h"

namespace ubcache {

void AttachFds(msghdr* msg, std::vector<char>* control, const std::vector<int>& fds) {
  control->assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
  msg->msg_control = control->data();
  msg->msg_controllen = control->size();
  cmsghdr* c = CMSG_FIRSTHDR(msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
}

bool NotifyServiceManager(const std::string& state, const std::vector<int>& fds) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || !*path) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  size_t len = std::strlen(path);
  if (len >= sizeof addr.sun_path || (path[0] != '/' && path[0] != '@')) return false;
  std::memcpy(addr.sun_path, path, len);
  if (path[0] == '@') addr.sun_path[0] = '\0';  // an abstract socket
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  iovec iov{const_cast<char*>(state.data()), state.size()};
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (!fds.empty()) AttachFds(&msg, &control, fds);
  ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  close(fd);
  return n == static_cast<ssize_t>(state.size());
}

namespace {

// One line: the manager shows STATUS= as it is.
std::string StatusLine(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  return "STATUS=" + s;
}

uint64_t MonotonicMicros() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

}  // namespace

Status ServiceLoop::Start() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGHUP);
  signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (signal_fd_ < 0 || stop_fd_ < 0) return Status::FromErrno(errno, "service loop: signalfd/eventfd");
  NotifyServiceManager("READY=1\n" + StatusLine(hooks_.status()));
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

void ServiceLoop::Stop() {
  if (thread_.joinable()) {
    NotifyServiceManager("STOPPING=1");
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (signal_fd_ >= 0) close(signal_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  signal_fd_ = stop_fd_ = -1;
}

void ServiceLoop::Loop() {
  SetThreadName("ub-service");
  // A reload may do synchronous device I/O (cache_mode persists in the
  // backing superblock), which needs a reactor bound to this thread.
  auto reactor = Reactor::Create(64);
  if (reactor.ok())
    (*reactor)->Bind();
  else
    UB_WARN("service loop: no reactor ({}); a reload that writes a superblock will fail",
            reactor.status().ToString());
  pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  while (true) {
    int n = poll(fds, 2, static_cast<int>(interval_ms_));
    if (n < 0 && errno != EINTR) {
      UB_ERROR("service loop: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    if (fds[0].revents) {
      signalfd_siginfo si;
      if (read(signal_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        // The manager waits for READY=1 after RELOADING=1; MONOTONIC_USEC
        // ties the reload to this signal (systemd 253's Type=notify-reload).
        NotifyServiceManager("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(MonotonicMicros()));
        hooks_.reload();
        NotifyServiceManager("READY=1\n" + StatusLine(hooks_.status()));
        continue;
      }
    }
    NotifyServiceManager(StatusLine(hooks_.status()));
  }
}

}  // namespace ubcache
