// SPDX-License-Identifier: Apache-2.0
#include "backend/reactor.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <ctime>
#include <future>
#include <thread>
#include <vector>

#include "device_test_support.h"
#include "util/clock.h"
#include "util/thread.h"

using namespace ubcache;
using namespace ubcache::test;

TEST_CASE("Post from another thread runs on the reactor thread") {
  auto reactor = BoundReactor();
  const auto reactor_thread = std::this_thread::get_id();
  constexpr int kN = 1000;
  std::vector<std::thread::id> ran_on;
  std::vector<int> order;
  // The poster starts while the reactor sleeps in io_uring_enter: Post must wake it.
  std::thread poster([&] {
    for (int i = 0; i < kN; i++)
      reactor->Post([&, i] {
        ran_on.push_back(std::this_thread::get_id());
        order.push_back(i);
      });
  });
  reactor->RunUntil([&] { return order.size() == kN; });
  poster.join();
  REQUIRE(order.size() == kN);
  for (int i = 0; i < kN; i++) {
    CHECK(ran_on[i] == reactor_thread);
    CHECK(order[i] == i);  // one poster's work runs in its order
  }
}

TEST_CASE("a reactor created on one thread runs on another and stops on request") {
  auto r = Reactor::Create();
  REQUIRE(r.ok());
  Reactor* reactor = r->get();
  std::promise<std::thread::id> ran;
  std::thread loop([reactor] { reactor->Run(); });
  reactor->Post([&] { ran.set_value(std::this_thread::get_id()); });
  auto fut = ran.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(fut.get() == loop.get_id());

  // The loop thread can do I/O on its own ring: a timer and a device request.
  std::promise<bool> io_ok;
  reactor->Post([&] {
    CHECK(Reactor::Current() == reactor);
    reactor->RunAt(NowNanos() + 1'000'000, [&] { io_ok.set_value(true); });
  });
  auto io_fut = io_ok.get_future();
  REQUIRE(io_fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);

  reactor->Stop();
  loop.join();
  CHECK(reactor->stopped());
}

TEST_CASE("file I/O works on a reactor that runs on a thread other than its creator") {
  auto r = Reactor::Create();
  REQUIRE(r.ok());
  Reactor* reactor = r->get();
  TempFile file(1 << 20);
  std::promise<Status> result;
  std::thread loop([&] {
    reactor->Bind();
    auto dev = OpenDevice(file.path());
    REQUIRE(dev.ok());
    AlignedBuffer buf(4096);
    FillPattern(buf.data(), 4096, 1);
    Status st = SyncWrite(**dev, 0, 4096, buf.data());
    if (st.ok()) st = SyncRead(**dev, 0, 4096, buf.data());
    result.set_value(st);
  });
  auto fut = result.get_future();
  // A ring bound to its creating thread would fail (EEXIST) or hang here.
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  loop.join();
  Status st = fut.get();
  INFO(st.ToString());
  CHECK(st.ok());
}

TEST_CASE("RunAt fires no earlier than its deadline and in deadline order") {
  auto reactor = BoundReactor();
  uint64_t now = NowNanos();
  const uint64_t ms = 1'000'000;
  struct Fired {
    int id;
    uint64_t at;
  };
  std::vector<Fired> fired;
  std::vector<uint64_t> deadline = {now + 30 * ms, now + 10 * ms, now + 20 * ms, now + 10 * ms,
                                    now + 5 * ms, now};
  for (int i = 0; i < static_cast<int>(deadline.size()); i++)
    reactor->RunAt(deadline[i], [&, i] { fired.push_back({i, NowNanos()}); });
  reactor->RunUntil([&] { return fired.size() == deadline.size(); });
  std::vector<int> ids;
  for (auto& f : fired) {
    INFO("timer " << f.id);
    CHECK(f.at >= deadline[f.id]);
    ids.push_back(f.id);
  }
  // Equal deadlines keep the order they were set in (1 before 3).
  CHECK(ids == std::vector<int>{5, 4, 1, 3, 2, 0});
}

TEST_CASE("a timer set from a timer callback fires too") {
  auto reactor = BoundReactor();
  int n = 0;
  uint64_t second_deadline = 0;
  uint64_t second_fired = 0;
  reactor->RunAt(NowNanos() + 1'000'000, [&] {
    n++;
    second_deadline = NowNanos() + 2'000'000;
    reactor->RunAt(second_deadline, [&] {
      n++;
      second_fired = NowNanos();
    });
  });
  reactor->RunUntil([&] { return n == 2; });
  CHECK(second_fired >= second_deadline);
}

TEST_CASE("Defer runs after the current callback returns, in order") {
  auto reactor = BoundReactor();
  std::vector<std::string> log;
  reactor->Post([&] {
    reactor->Defer([&] {
      log.push_back("deferred 1");
      reactor->Defer([&] { log.push_back("deferred from deferred"); });
      log.push_back("deferred 1 returns");
    });
    reactor->Defer([&] { log.push_back("deferred 2"); });
    log.push_back("posted returns");
  });
  reactor->RunUntil([&] { return log.size() == 5; });
  CHECK(log == std::vector<std::string>{"posted returns", "deferred 1", "deferred 1 returns",
                                        "deferred 2", "deferred from deferred"});
}

TEST_CASE("deferred work runs on the next turn without waiting") {
  auto reactor = BoundReactor();
  bool ran = false;
  reactor->Defer([&] { ran = true; });
  CHECK_FALSE(ran);  // not inside Defer
  reactor->RunOnce(false);
  CHECK(ran);
}

TEST_CASE("RunOnce without wait returns when there is nothing to do") {
  auto reactor = BoundReactor();
  for (int i = 0; i < 10; i++) reactor->RunOnce(false);
  bool ran = false;
  reactor->RunAt(NowNanos() + 3'600'000'000'000ull, [&] { ran = true; });  // an hour away
  reactor->RunOnce(false);
  CHECK_FALSE(ran);
}

TEST_CASE("Bind makes a reactor current for its thread only, and destruction unbinds it") {
  CHECK(Reactor::Current() == nullptr);
  {
    auto reactor = BoundReactor();
    CHECK(Reactor::Current() == reactor.get());
    Reactor* seen = reinterpret_cast<Reactor*>(1);
    std::thread([&] { seen = Reactor::Current(); }).join();
    CHECK(seen == nullptr);
  }
  CHECK(Reactor::Current() == nullptr);
}

TEST_CASE("reactors get distinct ids, and an id is reused once its reactor is gone") {
  auto a = Reactor::Create();
  auto b = Reactor::Create();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK((*a)->id() != (*b)->id());
  CHECK((*a)->id() < Reactor::kMaxReactors);
  unsigned freed = (*a)->id();
  a.value().reset();
  auto c = Reactor::Create();
  REQUIRE(c.ok());
  CHECK((*c)->id() == freed);
}

TEST_CASE("Stop from another thread ends Run") {
  auto r = Reactor::Create();
  REQUIRE(r.ok());
  Reactor* reactor = r->get();
  std::promise<void> started;
  std::thread loop([&] {
    reactor->Bind();
    reactor->Post([&] { started.set_value(); });
    reactor->Run();
  });
  started.get_future().wait();
  reactor->Stop();  // the loop is asleep in io_uring_enter, or about to be
  loop.join();
  CHECK(reactor->stopped());
}

TEST_CASE("many more requests in flight than the CQ holds all complete, each once") {
  // A 4-entry SQ (16-entry CQ), and 1000 NOPs prepared inside one callback,
  // so nothing is reaped while they go in: the SQ fills 250 times and the CQ
  // overflows. Whatever the kernel does with the overflow (keep it, or
  // refuse submissions with EBUSY until CQEs are reaped, which PrepareSqe
  // then sets aside), every completion must run exactly once.
  auto made = Reactor::Create(4);
  REQUIRE(made.ok());
  std::unique_ptr<Reactor> reactor = std::move(made).value();
  reactor->Bind();
  struct Nop final : IoCompletion {
    int* runs = nullptr;
    void Complete(int32_t res, uint32_t) override {
      CHECK(res == 0);
      (*runs)++;
    }
  };
  constexpr int kN = 1000;
  std::vector<Nop> nops(kN);
  std::vector<int> runs(kN, 0);
  const uint64_t base = reactor->inflight();
  reactor->Defer([&] {
    for (int i = 0; i < kN; i++) {
      nops[i].runs = &runs[i];
      io_uring_prep_nop(reactor->PrepareSqe(&nops[i]));
    }
  });
  int done = 0;
  reactor->RunUntil([&] {
    done = 0;
    for (int r : runs) done += r > 0;
    return done == kN;
  });
  reactor->RunOnce(false);
  for (int i = 0; i < kN; i++) REQUIRE(runs[i] == 1);
  CHECK(reactor->inflight() == base);
}

TEST_CASE("a serving reactor stops polling soon after a deep queue of small reads has completed") {
  // After more than two small reads in flight the reactor polls up to
  // kSmallDeepSpinNs through the queue's dips (SpinForWork); once the
  // reads are done and nothing comes, a poll that runs out must end in a
  // sleep, not in another poll: an idle daemon keeps no core busy.
  TempFile file(1 << 20);
  double idle_cpu_ms = -1;
  std::thread loop([&] {
    ServingThreadScope serving;
    auto reactor = BoundReactor();
    auto dev = OpenDevice(file.path());
    REQUIRE(dev.ok());
    constexpr int kReads = 16;
    std::vector<AlignedBuffer> bufs;
    for (int i = 0; i < kReads; i++) bufs.emplace_back(4096);
    int done = 0;
    for (int round = 0; round < 4; round++) {
      for (int i = 0; i < kReads; i++) {
        IoRequest req;
        req.offset = uint64_t(i) * 65536;
        req.len = 4096;
        req.buf = bufs[i].data();
        (*dev)->Submit(req, [&](Status st) {
          CHECK(st.ok());
          done++;
        });
      }
      reactor->RunUntil([&] { return done == (round + 1) * kReads; });
    }
    auto thread_cpu_ns = [] {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
    };
    // 300 ms of nothing but a timer at its end, within and past the 20 ms
    // the deep queue is remembered.
    bool fired = false;
    uint64_t cpu0 = thread_cpu_ns();
    reactor->RunAt(NowNanos() + 300'000'000, [&] { fired = true; });
    reactor->RunUntil([&] { return fired; });
    idle_cpu_ms = double(thread_cpu_ns() - cpu0) / 1e6;
  });
  loop.join();
  INFO("CPU over 300 ms idle: " << idle_cpu_ms << " ms");
  // One run-out poll (1 ms) and a few short ones; polling through the
  // idle time would be ~300 ms.
  CHECK(idle_cpu_ms >= 0);
  CHECK(idle_cpu_ms < 30);
}
