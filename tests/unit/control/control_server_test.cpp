// SPDX-License-Identifier: Apache-2.0
// ControlServer over real sockets: requests, refusals, peer credentials and
// the HTTP metrics listener.
#include "control/control_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "tests/unit/control/control_rig.h"

using namespace ubcache;
using namespace ubcache::control;

namespace {

// Fixed before any fork, so children connect to the parent's socket.
const std::string& SocketPath() {
  static const std::string path = "/tmp/ubcache-ctl-test." + std::to_string(getpid()) + ".sock";
  return path;
}

int Connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `bytes`, returns every frame up to the final ok/error (or EOF).
std::vector<Frame> Exchange(int fd, const std::string& bytes, size_t want = 1) {
  REQUIRE(write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  FrameReader fr;
  std::vector<Frame> frames;
  size_t finals = 0;
  char buf[65536];
  while (finals < want) {
    auto f = fr.Pop();
    REQUIRE(f.ok());
    if (*f) {
      frames.push_back(**f);
      if ((*f)->kind != FrameKind::kProgress) finals++;
      continue;
    }
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    fr.Feed(buf, static_cast<size_t>(n));
  }
  return frames;
}

struct ServerRig {
  ControlRig rig;
  std::unique_ptr<ControlServer> server;
  explicit ServerRig(bool metrics = false) {
    ControlServerOptions o;
    o.socket_path = SocketPath();
    if (metrics) o.metrics_listen = "127.0.0.1:0";
    server = std::make_unique<ControlServer>(o, std::vector<Target>{rig.target});
    REQUIRE(server->Start().ok());
  }
};

}  // namespace

TEST_CASE("the control socket is mode 0600 and answers pipelined requests on one connection") {
  ServerRig s;
  struct stat st;
  REQUIRE(stat(SocketPath().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  int fd = Connect(SocketPath());
  REQUIRE(fd >= 0);
  auto frames = Exchange(fd, "ubcache-ctl/1 set sequential_cutoff 1M\nubcache-ctl/1 get sequential_cutoff\n", 2);
  REQUIRE(frames.size() == 2);
  CHECK(frames[0].kind == FrameKind::kOk);
  CHECK(frames[1].body == "1048576\n");
  close(fd);
  s.server->Stop();
  CHECK(access(SocketPath().c_str(), F_OK) != 0);  // removed on stop
}

TEST_CASE("malformed, unknown and oversized requests get an error and the server carries on") {
  ServerRig s;
  int fd = Connect(SocketPath());
  REQUIRE(fd >= 0);
  auto frames = Exchange(fd, "hello\nubcache-ctl/1 nosuch\nubcache-ctl/1 get nosuch\n", 3);
  REQUIRE(frames.size() == 3);
  for (const Frame& f : frames) CHECK(f.kind == FrameKind::kError);
  CHECK(frames[1].body == "unknown command 'nosuch'");
  auto big = Exchange(fd, std::string(10000, 'A'));
  REQUIRE(big.size() == 1);
  CHECK(big[0].body == "request longer than 4096 bytes");
  close(fd);
  fd = Connect(SocketPath());  // a new client is still served
  REQUIRE(fd >= 0);
  auto ok = Exchange(fd, "ubcache-ctl/1 get cache_mode\n");
  REQUIRE(ok.size() == 1);
  CHECK(ok[0].body == "writethrough\n");
  close(fd);
}

TEST_CASE("a peer that is neither root nor the daemon's uid is refused") {
  if (geteuid() != 0) return;  // needs root to become another user (CI runs as root)
  ServerRig s;
  // Mode 0600 keeps other users from connecting at all ...
  pid_t pid = fork();
  if (pid == 0) {
    if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534)) _exit(10);
    int fd = Connect(SocketPath());
    _exit(fd < 0 && errno == EACCES ? 0 : 11);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WEXITSTATUS(status) == 0);
  // ... and SO_PEERCRED refuses them even where the mode was loosened.
  REQUIRE(chmod(SocketPath().c_str(), 0666) == 0);
  pid = fork();
  if (pid == 0) {
    if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534)) _exit(10);
    int fd = Connect(SocketPath());
    if (fd < 0) _exit(12);
    const char req[] = "ubcache-ctl/1 set sequential_cutoff 0\n";
    if (write(fd, req, sizeof req - 1) < 0) _exit(13);
    char buf[512];
    std::string got;
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
    _exit(got.rfind("error ", 0) == 0 && got.find("permission denied: uid 65534") != std::string::npos ? 0 : 14);
  }
  waitpid(pid, &status, 0);
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(s.rig.set->knobs().sequential_cutoff.load() == kAutoCutoff);  // unchanged
}

TEST_CASE("the metrics listener answers GET /metrics with Prometheus text and 404 elsewhere") {
  ServerRig s(true);
  REQUIRE(s.server->metrics_port() > 0);
  auto get = [&](const std::string& head) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(s.server->metrics_port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(write(fd, head.data(), head.size()) == static_cast<ssize_t>(head.size()));
    std::string got;
    char buf[65536];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
    close(fd);
    return got;
  };
  std::string ok = get("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(ok.find("\r\n\r\n# HELP ubcache_") != std::string::npos);
  CHECK(get("GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(get("POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
  CHECK(get("\x01\x02 garbage\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
}
