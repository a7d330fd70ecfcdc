// SPDX-License-Identifier: Apache-2.0
#include "tools/ctl_client.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

namespace ubcache {

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

Result<ControlReply> CallControl(const std::string& path, const control::Request& req, int timeout_ms,
                                 const std::function<void(const std::string&)>& progress) {
  sockaddr_un a{};
  if (path.size() >= sizeof a.sun_path) return Status::InvalidArgument(path + ": path too long");
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  Fd s;
  s.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s.fd < 0) return Status::FromErrno(errno, "socket");
  if (connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) {
    int err = errno;
    return Status::FromErrno(err, "cannot reach the daemon at " + path +
                                      (err == EACCES ? " (only root and the daemon's user may use it)" : ""));
  }
  signal(SIGPIPE, SIG_IGN);
  std::string line = control::EncodeRequest(req);
  for (size_t off = 0; off < line.size();) {
    ssize_t n = send(s.fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    // A daemon that refuses us answers and closes before reading: its
    // error frame is waiting to be read below.
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) break;
    if (n < 0) return Status::FromErrno(errno, "sending to " + path);
    off += static_cast<size_t>(n);
  }
  control::FrameReader reader;
  for (;;) {
    auto frame = reader.Pop();
    if (!frame.ok()) return Status::IoError(path + ": " + frame.status().message());
    if (*frame) {
      const control::Frame& f = **frame;
      if (f.kind == control::FrameKind::kProgress) {
        if (progress) progress(f.body);
        continue;
      }
      return ControlReply{f.kind != control::FrameKind::kError, f.body};
    }
    pollfd p{s.fd, POLLIN, 0};
    int rc = poll(&p, 1, timeout_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) return Status::IoError(path + ": no reply within " + std::to_string(timeout_ms / 1000) + " s");
    char buf[65536];
    ssize_t n = read(s.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::IoError(path + ": the daemon closed the connection without a reply");
    reader.Feed(buf, static_cast<size_t>(n));
  }
}

}  // namespace ubcache
