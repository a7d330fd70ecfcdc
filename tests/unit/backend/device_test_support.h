// SPDX-License-Identifier: Apache-2.0
// Shared helpers for the backend unit tests: a reactor bound to the test's
// thread, temp files under /var/tmp, a private nbdkit server, data patterns
// and a way to submit many requests and turn the reactor until all complete.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/block_device.h"
#include "backend/reactor.h"
#include "backend/sync_io.h"
#include "util/aligned_buffer.h"
#include "util/clock.h"

namespace ubcache::test {

inline std::unique_ptr<Reactor> BoundReactor() {
  auto r = Reactor::Create();
  REQUIRE(r.ok());
  std::unique_ptr<Reactor> reactor = std::move(r).value();
  reactor->Bind();
  return reactor;
}

// A sparse file under /var/tmp (a real filesystem: /tmp may be tmpfs, which
// refuses O_DIRECT), removed on destruction.
class TempFile {
 public:
  explicit TempFile(uint64_t size) {
    char tmpl[] = "/var/tmp/ubcache-test-XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    path_ = tmpl;
    REQUIRE(ftruncate(fd, static_cast<off_t>(size)) == 0);
    close(fd);
  }
  ~TempFile() { unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `nbdkit -f --exit-with-parent -U SOCKET memory SIZE`, started by the test
// and killed on destruction. Ready once nbdkit has written its pid file,
// which it does only when it accepts connections.
class NbdkitServer {
 public:
  explicit NbdkitServer(const std::string& size = "64M") {
    char tmpl[] = "/tmp/ubcache-nbd-XXXXXX";  // sockets only; short path for sun_path
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/nbd.sock";
    std::string pidfile = dir_ + "/nbdkit.pid";
    std::vector<std::string> args = {"nbdkit", "-f",     "--exit-with-parent", "-U", socket_,
                                     "-P",     pidfile,  "memory",             size};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawnp(&pid_, "nbdkit", nullptr, nullptr, argv.data(), ::environ);
    REQUIRE(rc == 0);
    // Wait (bounded) for the external server to come up; this polls another
    // process, it does not synchronise our own threads.
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      struct stat st;
      if (stat(pidfile.c_str(), &st) == 0 && st.st_size > 0 && stat(socket_.c_str(), &st) == 0)
        break;
      int status = 0;
      REQUIRE(waitpid(pid_, &status, WNOHANG) == 0);  // nbdkit must not have exited
      REQUIRE(std::chrono::steady_clock::now() < give_up);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    unlink(pidfile.c_str());
  }
  ~NbdkitServer() {
    Kill(SIGTERM);
    unlink(socket_.c_str());
    rmdir(dir_.c_str());
  }
  NbdkitServer(const NbdkitServer&) = delete;
  NbdkitServer& operator=(const NbdkitServer&) = delete;

  // Ends the server (a process this test started) and reaps it.
  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::string uri() const { return "nbd+unix:///?socket=" + socket_; }
  pid_t pid() const { return pid_; }

 private:
  std::string dir_, socket_;
  pid_t pid_ = -1;
};

// A device and everything it needs. Members are destroyed in reverse order:
// the device goes first (an NBD device must be gone before its reactor
// runs again), then the reactor (its ring's polls hold the NBD socket open,
// and nbdkit waits for its clients before it exits), then the server or file.
struct TestDevice {
  std::unique_ptr<NbdkitServer> server;
  std::unique_ptr<TempFile> file;
  std::unique_ptr<Reactor> reactor;
  std::unique_ptr<BlockDevice> dev;
  std::string kind;
};

constexpr uint64_t kTestDeviceSize = 64ull << 20;

// Kinds: mem, file, nbd, fault, fault-drop, fault-tear, sas, hdd — each 64 MiB.
inline TestDevice MakeTestDevice(const std::string& kind) {
  TestDevice t;
  t.kind = kind;
  t.reactor = BoundReactor();
  std::string spec;
  if (kind == "mem") {
    spec = "mem:64M";
  } else if (kind == "file") {
    t.file = std::make_unique<TempFile>(kTestDeviceSize);
    spec = t.file->path();
  } else if (kind == "nbd") {
    t.server = std::make_unique<NbdkitServer>("64M");
    spec = "nbd:" + t.server->uri();
  } else if (kind == "fault") {
    spec = "fault:mem:64M";
  } else if (kind == "fault-drop") {
    spec = "fault,drop_unflushed=1:mem:64M";
  } else if (kind == "fault-tear") {
    spec = "fault,tear_unflushed=1,seed=7:mem:64M";
  } else if (kind == "sas") {
    spec = "sas:mem:64M";
  } else if (kind == "hdd") {
    spec = "hdd,rpm=15000,seek_ms=2,mbps=250,seed=7:mem:64M";
  } else {
    FAIL("unknown test device kind " << kind);
  }
  auto dev = OpenDevice(spec);
  INFO(spec);
  REQUIRE(dev.ok());
  t.dev = std::move(dev).value();
  REQUIRE(t.dev->size() == kTestDeviceSize);
  REQUIRE(t.dev->spec() == spec);
  return t;
}

// Fills `buf` with a pattern that differs per `seed` and per 8-byte word, so
// a block read from the wrong place or the wrong write is caught.
inline void FillPattern(void* buf, uint64_t len, uint64_t seed) {
  auto* p = static_cast<uint8_t*>(buf);
  for (uint64_t i = 0; i < len; i += 8) {
    uint64_t v = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
    v ^= v >> 29;
    std::memcpy(p + i, &v, std::min<uint64_t>(8, len - i));
  }
}

inline std::vector<uint8_t> Pattern(uint64_t len, uint64_t seed) {
  std::vector<uint8_t> v(len);
  FillPattern(v.data(), len, seed);
  return v;
}

// "" when equal, else where they first differ; keeps failure output short.
inline std::string Diff(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); i++) {
    if (got[i] != want[i]) {
      size_t n = 0;
      for (size_t j = i; j < got.size(); j++) n += got[j] != want[j];
      return "first difference at byte " + std::to_string(i) + " (got " +
             std::to_string(got[i]) + ", want " + std::to_string(want[i]) + "), " +
             std::to_string(n) + " bytes differ";
    }
  }
  return "";
}

inline bool IsZero(const uint8_t* p, uint64_t len) {
  for (uint64_t i = 0; i < len; i++)
    if (p[i] != 0) return false;
  return true;
}

inline Status WriteBytes(BlockDevice& dev, uint64_t off, const std::vector<uint8_t>& data,
                         uint32_t flags = 0) {
  AlignedBuffer b(data.size());
  std::memcpy(b.data(), data.data(), data.size());
  return SyncWrite(dev, off, data.size(), b.data(), flags);
}

inline std::vector<uint8_t> ReadBytes(BlockDevice& dev, uint64_t off, uint64_t len) {
  AlignedBuffer b(len);
  std::memset(b.data(), 0xEE, len);  // not zero, so a read that does nothing shows
  Status st = SyncRead(dev, off, len, b.data());
  INFO(st.ToString());
  REQUIRE(st.ok());
  return std::vector<uint8_t>(b.data(), b.data() + len);
}

// Submits `req` and reports whether the completion ran inside Submit(), which
// the BlockDevice contract forbids, then waits for it.
inline Status SubmitAndWait(BlockDevice& dev, const IoRequest& req, bool* ran_inside = nullptr) {
  std::optional<Status> result;
  dev.Submit(req, [&](Status st) { result = std::move(st); });
  if (ran_inside) *ran_inside = result.has_value();
  Reactor::Current()->RunUntil([&] { return result.has_value(); });
  return std::move(*result);
}

}  // namespace ubcache::test
