// SPDX-License-Identifier: Apache-2.0
// A serving reactor never waits: a blocking wait on a thread marked serving
// aborts in a build with assertions, and is let through in one without
// (util/thread.h). Each case runs in a child process, which the check ends.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "util/thread.h"
#include "util/thread_annotations.h"

using namespace ubcache;

namespace {

// How the child running fn ended: its signal, or 0 when it exited normally.
int ChildSignal(const std::function<void()>& fn) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Catch2's fatal-signal handler would catch the abort and report from
    // inside the handler (allocating: TSan ends the child for that, with
    // its own exit code): the child dies of the signal itself instead.
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGABRT, &dfl, nullptr);
    fn();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) return WTERMSIG(status);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return 0;
}

#ifdef NDEBUG
constexpr int kOnServing = 0;  // the check is compiled out
#else
constexpr int kOnServing = SIGABRT;
#endif

void WaitOnCondVar() {
  Mutex mu;
  CondVar cv;
  MutexLock l(&mu);
  cv.WaitFor(&mu, std::chrono::milliseconds(1));
}

}  // namespace

TEST_CASE("a condition-variable wait on a serving thread is caught") {
  CHECK(ChildSignal([] {
          MarkServingThread(true);
          WaitOnCondVar();
        }) == kOnServing);
  // The same wait elsewhere is fine.
  CHECK(ChildSignal([] { WaitOnCondVar(); }) == 0);
  CHECK(ChildSignal([] {
          ServingThreadScope serving;
          { ServingThreadScope not_serving(false); WaitOnCondVar(); }
        }) == 0);
}

TEST_CASE("the serving mark is per thread and scoped") {
  CHECK_FALSE(IsServingThread());
  {
    ServingThreadScope serving;
    CHECK(IsServingThread());
    bool other = true;
    std::thread([&] { other = IsServingThread(); }).join();
    CHECK_FALSE(other);
    CHECK(ChildSignal([] { AssertMayBlock("a test's wait"); }) == kOnServing);
  }
  CHECK_FALSE(IsServingThread());
  CHECK(ChildSignal([] { AssertMayBlock("a test's wait"); }) == 0);
}
