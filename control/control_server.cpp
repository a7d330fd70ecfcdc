// SPDX-License-Identifier: Apache-2.0
#include "control/control_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "backend/reactor.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/thread.h"

namespace ubcache::control {

namespace {

constexpr size_t kMaxConns = 64;
constexpr size_t kMaxOutBytes = 64 << 20;

Status Errno(const std::string& what) { return Status::FromErrno(errno, what); }

uint64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}


sockaddr_un UnixAddr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

// The final frame of a command: its reply body, or its error.
std::string ReplyFrame(const Result<std::string>& body) {
  return body.ok() ? EncodeFrame(FrameKind::kOk, body.value()) : EncodeFrame(FrameKind::kError, body.status().message());
}

// Is a daemon listening on `path`?
bool Listening(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un a = UnixAddr(path);
  bool live = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return live;
}

}  // namespace

std::string DefaultSocketPath(const std::string& export_name) {
  std::string name = export_name.empty() ? "ubcache" : export_name;
  for (char& c : name)
    if (c == '/' || c <= ' ' || c > '~') c = '_';
  return "/run/ubcache/" + name + ".sock";
}

struct ControlServer::Conn {
  int fd = -1;
  bool http = false;
  bool closing = false;  // close once `out` is written
  bool waiting = false;  // a long command runs on the worker; later lines wait
  // Dropped by the control thread (the client went away): the long command
  // it waits for, read by the worker, may give up.
  std::atomic<bool> gone{false};
  LineReader lines;
  std::string head;  // http
  std::string out;
  ~Conn() {
    if (fd >= 0) close(fd);
  }
};

// A long command handed to the worker. `frames` and `finished` are the
// worker's output, guarded by work_mu_; the rest is the poll thread's.
struct ControlServer::Job {
  std::shared_ptr<Conn> conn;
  Request request;
  std::string what;
  uint64_t wall0 = 0;
  // Under the server's work_mu_ (the worker writes them, the poll thread
  // collects them).
  std::string frames;
  bool finished = false;
};

ControlServer::ControlServer(ControlServerOptions o, std::vector<Target> targets)
    : o_(std::move(o)), controller_(std::move(targets), o_.stop) {}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::Start() {
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0 || wake_fd_ < 0) return Errno("control: eventfd");
  if (!o_.socket_path.empty()) {
    const std::string& path = o_.socket_path;
    if (path.size() >= sizeof(sockaddr_un::sun_path))
      return Status::InvalidArgument("--control " + path + ": path too long for a Unix socket");
    size_t slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) mkdir(path.substr(0, slash).c_str(), 0755);  // e.g. /run/ubcache
    struct stat st;
    if (lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) return Status::InvalidArgument("--control " + path + ": exists and is not a socket");
      if (Listening(path)) {
        if (o_.socket_required)
          return Status::Busy("--control " + path + ": another daemon is listening there");
        UB_WARN("control socket {} belongs to another running daemon; this one runs without a control socket "
                "(give it --control PATH)",
                path);
        goto http;
      }
      unlink(path.c_str());  // stale: its daemon is gone
    }
    {
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) return Errno("control: socket");
      sockaddr_un a = UnixAddr(path);
      // 0600 from the start: umask makes the socket file no wider than this
      // between bind and chmod.
      mode_t old = umask(0177);
      int rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      umask(old);
      if (rc < 0 || chmod(path.c_str(), 0600) < 0 || listen(fd, 16) < 0) {
        Status s = Errno("--control " + path);
        close(fd);
        if (!o_.socket_required) {
          UB_WARN("{}; running without a control socket", s.message());
          goto http;
        }
        return s;
      }
      unix_fd_ = fd;
      socket_path_ = path;
      UB_INFO("control socket: {} ('ubcache ctl --control {} show')", path, path);
    }
  }
http:
  if (!o_.metrics_listen.empty()) {
    const std::string& addr = o_.metrics_listen;
    size_t colon = addr.rfind(':');
    if (colon == std::string::npos)
      return Status::InvalidArgument("--metrics-listen " + addr + ": want HOST:PORT, e.g. 127.0.0.1:9105");
    std::string host = addr.substr(0, colon);
    if (host == "localhost") host = "127.0.0.1";
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    char* end = nullptr;
    long port = strtol(addr.c_str() + colon + 1, &end, 10);
    if (inet_pton(AF_INET, host.c_str(), &sin.sin_addr) != 1 || colon + 1 == addr.size() || *end || port < 0 ||
        port > 65535)
      return Status::InvalidArgument("--metrics-listen " + addr + ": want IPV4:PORT, e.g. 127.0.0.1:9105");
    sin.sin_port = htons(static_cast<uint16_t>(port));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Errno("metrics: socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) < 0 || listen(fd, 16) < 0) {
      Status s = Errno("--metrics-listen " + addr);
      close(fd);
      return s;
    }
    socklen_t len = sizeof sin;
    getsockname(fd, reinterpret_cast<sockaddr*>(&sin), &len);
    metrics_port_ = ntohs(sin.sin_port);
    http_fd_ = fd;
    UB_INFO("metrics: http://{}:{}/metrics", host, metrics_port_);
  }
  worker_ = std::thread([this] { WorkerLoop(); });
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

uint64_t ControlServer::Timing::WallPercentileNs(double p) const {
  uint64_t want = static_cast<uint64_t>(p * static_cast<double>(requests)), seen = 0;
  for (unsigned b = 0; b < 64; b++) {
    seen += wall_log2[b];
    if (seen > want) return std::min<uint64_t>(max_wall_ns, (uint64_t{2} << b) - 1);  // the bin's upper bound
  }
  return max_wall_ns;
}

void ControlServer::Record(uint64_t wall0, const std::string& what) {
  uint64_t wall = NowNanos() - wall0;
  if (wall >= 5'000'000) UB_WARN("control: '{}' took {} us", what, wall / 1000);
  timing_.requests++;
  timing_.max_wall_ns = std::max(timing_.max_wall_ns, wall);
  timing_.wall_log2[wall ? 63 - __builtin_clzll(wall) : 0]++;
}

void ControlServer::Stop() {
  // A `ctl flush` running on the worker stops within a second instead of
  // draining everything first (the daemon's own shutdown flushes what it must).
  stopping_.store(true);
  if (thread_.joinable()) {
    uint64_t one = 1;
    ssize_t n = write(stop_fd_, &one, sizeof one);
    (void)n;
    thread_.join();
    if (timing_.requests)
      UB_INFO("control: {} requests answered in wall p50 <= {} us, p99 <= {} us, max {} us; thread cpu {} us "
              "({} us per request); {} long commands on the worker",
              timing_.requests, timing_.WallPercentileNs(0.5) / 1000, timing_.WallPercentileNs(0.99) / 1000,
              timing_.max_wall_ns / 1000, timing_.thread_cpu_ns / 1000,
              timing_.thread_cpu_ns / 1000 / timing_.requests, timing_.long_commands);
  }
  if (worker_.joinable()) {
    {
      MutexLock l(&work_mu_);
      work_stop_ = true;  // after the command it runs, if any; queued ones are dropped
    }
    work_cv_.SignalAll();
    worker_.join();
  }
  jobs_.clear();
  {
    MutexLock l(&work_mu_);
    queue_.clear();
  }
  conns_.clear();
  if (unix_fd_ >= 0) {
    close(unix_fd_);
    unix_fd_ = -1;
    unlink(socket_path_.c_str());
  }
  if (http_fd_ >= 0) {
    close(http_fd_);
    http_fd_ = -1;
  }
  for (int* fd : {&stop_fd_, &wake_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

void ControlServer::Accept(int lfd, bool http) {
  for (;;) {
    int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a connection that went away
    auto c = std::make_shared<Conn>();
    c->fd = fd;
    c->http = http;
    if (conns_.size() >= kMaxConns) continue;  // closed by ~Conn: too many clients
    if (!http) {
      ucred cred{};
      socklen_t len = sizeof cred;
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
          (cred.uid != 0 && cred.uid != geteuid())) {
        UB_WARN("control: refused a connection from uid {} (only root and uid {} may control this daemon)", cred.uid,
                geteuid());
        c->out = EncodeFrame(FrameKind::kError, "permission denied: uid " + std::to_string(cred.uid) +
                                                    " is neither root nor the daemon's uid " +
                                                    std::to_string(geteuid()));
        c->closing = true;
      }
    }
    conns_.push_back(std::move(c));
  }
}

void ControlServer::HandleLine(const std::shared_ptr<Conn>& c, const std::string& line) {
  const uint64_t wall0 = NowNanos();
  Result<Request> req = ParseRequest(line);
  if (req.ok() && Controller::RunsLong(*req)) {
    auto job = std::make_shared<Job>();
    job->conn = c;
    job->request = std::move(*req);
    job->what = line;
    job->wall0 = wall0;
    c->waiting = true;
    jobs_.push_back(job);
    {
      MutexLock l(&work_mu_);
      queue_.push_back(std::move(job));
    }
    work_cv_.Signal();
    return;
  }
  if (!req.ok()) {
    c->out += EncodeFrame(FrameKind::kError, req.status().message());
  } else {
    c->out += ReplyFrame(controller_.Execute(*req, [](const std::string&) {}));
  }
  Record(wall0, line);
}

void ControlServer::WorkerLoop() {
  SetThreadName("ub-control-io");
  auto reactor = Reactor::Create(64);
  if (reactor.ok()) (*reactor)->Bind();  // for superblock writes and flush
  else
    UB_WARN("control: no reactor ({}); commands that do I/O will fail", reactor.status().ToString());
  auto wake = [this] {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof one);
    (void)n;
  };
  for (;;) {
    std::shared_ptr<Job> job;
    {
      MutexLock l(&work_mu_);
      while (!work_stop_ && queue_.empty()) work_cv_.Wait(&work_mu_);
      if (work_stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Result<std::string> body = controller_.Execute(
        job->request,
        [&](const std::string& p) {
          {
            MutexLock l(&work_mu_);
            job->frames += EncodeFrame(FrameKind::kProgress, p);
          }
          wake();
        },
        [&] { return stopping_.load() || job->conn->gone.load(); });
    {
      MutexLock l(&work_mu_);
      job->frames += ReplyFrame(body);
      job->finished = true;
    }
    wake();
  }
}

void ControlServer::CollectJobs() {
  uint64_t n;
  while (read(wake_fd_, &n, sizeof n) > 0) {
  }
  std::vector<std::shared_ptr<Conn>> resume;
  {
    MutexLock l(&work_mu_);
    for (size_t i = 0; i < jobs_.size();) {
      Job& j = *jobs_[i];
      j.conn->out += j.frames;
      j.frames.clear();
      if (!j.finished) {
        i++;
        continue;
      }
      UB_DEBUG("control: '{}' took {} us on the worker", j.what, (NowNanos() - j.wall0) / 1000);
      timing_.long_commands++;
      j.conn->waiting = false;
      resume.push_back(j.conn);
      jobs_.erase(jobs_.begin() + static_cast<long>(i));
    }
  }
  for (auto& c : resume) RunLines(c);
}

void ControlServer::RunLines(const std::shared_ptr<Conn>& c) {
  std::string line;
  while (!c->waiting) {
    LineReader::Next next = c->lines.Pop(&line);
    if (next == LineReader::Next::kNeedMore) return;
    if (next == LineReader::Next::kTooLong) {
      c->out += EncodeFrame(FrameKind::kError, "request longer than " + std::to_string(kMaxRequestBytes) + " bytes");
      c->closing = true;
      return;
    }
    HandleLine(c, line);
  }
}

void ControlServer::HandleHttp(Conn& c) {
  HttpRequest req;
  HttpParse p = ParseHttpRequest(c.head, &req);
  if (p == HttpParse::kNeedMore) return;
  const uint64_t wall0 = NowNanos();
  std::string status, type = "text/plain; charset=utf-8", body;
  if (p == HttpParse::kBad) {
    status = "400 Bad Request";
    body = "bad request\n";
  } else if (req.method != "GET" && req.method != "HEAD") {
    status = "405 Method Not Allowed";
    body = "only GET\n";
  } else if (req.target != "/metrics" && req.target.rfind("/metrics?", 0) != 0) {
    status = "404 Not Found";
    body = "see /metrics\n";
  } else {
    status = "200 OK";
    type = "text/plain; version=0.0.4; charset=utf-8";
    body = controller_.Metrics();
  }
  c.out = "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\nConnection: close\r\n\r\n";
  if (req.method != "HEAD") c.out += body;
  c.closing = true;
  Record(wall0, "http " + req.target);
}

void ControlServer::OnReadable(const std::shared_ptr<Conn>& cp) {
  Conn& c = *cp;
  char buf[4096];
  for (;;) {
    ssize_t n = read(c.fd, buf, sizeof buf);
    if (n == 0) {
      c.closing = true;  // the peer is done; answer what it sent, then close
      break;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) {
        c.closing = true;
        c.out.clear();
      }
      break;
    }
    if (c.http) {
      c.head.append(buf, static_cast<size_t>(n));
      HandleHttp(c);
      if (c.closing) return;
      continue;
    }
    c.lines.Feed(buf, static_cast<size_t>(n));
    RunLines(cp);
    if (c.closing) return;
    if (c.out.size() > kMaxOutBytes || c.lines.buffered() > kMaxOutBytes) {
      // A client that sends but never reads, or piles up requests behind a
      // long command.
      c.out.clear();
      c.closing = true;
      return;
    }
    // A short read drained the socket (a request is one small line); poll
    // says when there is more, which saves a read that would say EAGAIN.
    if (static_cast<size_t>(n) < sizeof buf) break;
  }
}

bool ControlServer::Flush(Conn& c) {
  while (!c.out.empty()) {
    ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN;
    }
    c.out.erase(0, static_cast<size_t>(n));
  }
  return true;
}

void ControlServer::Loop() {
  SetThreadName("ub-control");
  // A request is tens of microseconds of work; with a short slice the
  // thread answers when it wakes instead of queueing behind the I/O
  // threads' slices on a saturated machine.
  if (!RequestShortSlice(200'000)) UB_DEBUG("control: the kernel refused a short scheduler slice");
  std::vector<pollfd> fds;
  constexpr size_t kFixed = 4;  // stop, wake, unix listener, http listener
  for (;;) {
    fds.clear();
    fds.push_back({stop_fd_, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({unix_fd_, POLLIN, 0});  // poll ignores negative fds
    fds.push_back({http_fd_, POLLIN, 0});
    for (auto& c : conns_) {
      // A connection waiting for a long command is not read meanwhile, nor
      // polled at all when it has nothing to send (a hangup would wake
      // poll at once, again and again).
      short ev = (c->closing || c->waiting ? 0 : POLLIN) | (c->out.empty() ? 0 : POLLOUT);
      fds.push_back({ev ? c->fd : -1, ev, 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      UB_ERROR("control: poll: {}", strerror(errno));
      return;
    }
    if (fds[0].revents) {
      timing_.thread_cpu_ns = ThreadCpuNanos();
      return;
    }
    if (fds[1].revents & POLLIN) CollectJobs();
    size_t n = conns_.size();  // Accept appends; new ones are polled next turn
    std::vector<bool> done(n, false);
    for (size_t i = 0; i < n; i++) {
      const std::shared_ptr<Conn>& c = conns_[i];
      short re = fds[kFixed + i].revents;
      if (!c->waiting && (re & (POLLIN | POLLHUP | POLLERR))) OnReadable(c);
      done[i] = !Flush(*c) || (re & POLLERR) || (c->closing && c->out.empty() && !c->waiting);
    }
    for (size_t i = n; i-- > 0;)
      if (done[i]) {
        conns_[i]->gone.store(true);
        conns_.erase(conns_.begin() + static_cast<long>(i));
      }
    if (fds[2].revents & POLLIN) Accept(unix_fd_, false);
    if (fds[3].revents & POLLIN) Accept(http_fd_, true);
  }
}

}  // namespace ubcache::control
