// SPDX-License-Identifier: Apache-2.0
// DeadlineScheduler's rules, each on a device below that completes only when
// the test says so, so the order of dispatch is observed exactly; then data
// and threads through the real spindle model.
#include "backend/deadline_scheduler.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "device_test_support.h"

using namespace ubcache;
using namespace ubcache::test;

namespace {

// Records what reaches it; completes a request when the test calls Complete().
class HeldDevice final : public BlockDevice {
 public:
  HeldDevice() : BlockDevice("held", 1ull << 30, 4096, false) {}
  struct Held {
    IoRequest req;
    IoDone done;
  };
  std::vector<Held> submitted;  // in dispatch order
  size_t completed = 0;

  // Completes the oldest uncompleted request (the device serves in order).
  void CompleteNext() {
    REQUIRE(completed < submitted.size());
    CompleteLater(std::move(submitted[completed++].done), Status::OK());
  }
  size_t at_device() const { return submitted.size() - completed; }
  std::string order() const {
    std::string s;
    for (const Held& h : submitted) {
      if (!s.empty()) s += " ";
      s += (h.req.op == IoOp::kRead ? "r" : h.req.op == IoOp::kFlush ? "f" : "w") +
           std::to_string(h.req.offset / 4096);
    }
    return s;
  }

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override {
    submitted.push_back({req, std::move(done)});
  }
};

struct Rig {
  std::unique_ptr<Reactor> reactor = BoundReactor();
  HeldDevice* dev;
  std::unique_ptr<DeadlineScheduler> sched;
  AlignedBuffer buf{4096};
  int done = 0;

  explicit Rig(DeadlineScheduler::Options o) {
    auto d = std::make_unique<HeldDevice>();
    dev = d.get();
    sched = std::make_unique<DeadlineScheduler>(std::move(d), o);
  }
  // A request still at the device holds the scheduler's state (its
  // completion does), so every test ends with the device drained.
  ~Rig() {
    for (;;) {
      if (dev->at_device() > 0) {
        Complete();
      } else if (sched->stats().queued > 0) {
        reactor->RunUntil([&] { return dev->at_device() > 0; });
      } else {
        break;
      }
    }
    Turn();
  }
  void Read(uint64_t block) {
    sched->Read(block * 4096, 4096, buf.data(), [this](Status st) {
      CHECK(st.ok());
      done++;
    });
  }
  void Write(uint64_t block) {
    sched->Write(block * 4096, 4096, buf.data(), 0, [this](Status st) {
      CHECK(st.ok());
      done++;
    });
  }
  // Completes the request at the device and lets every callback run.
  void Complete() {
    dev->CompleteNext();
    Turn();
  }
  void Turn() {
    for (int i = 0; i < 4; i++) reactor->RunOnce(false);
  }
};

DeadlineScheduler::Options Quick() {
  DeadlineScheduler::Options o;
  o.anticipate_ns = 20'000'000;    // 20 ms
  o.write_expire_ns = 200'000'000; // 200 ms
  o.write_batch = 2;
  return o;
}

}  // namespace

TEST_CASE("the scheduler gives the device one request at a time and reads before writes") {
  Rig rig(Quick());
  rig.Write(10);
  rig.Write(11);
  rig.Write(12);
  rig.Read(500);
  CHECK(rig.dev->order() == "w10");  // depth 1: the rest wait
  rig.Complete();
  CHECK(rig.dev->order() == "w10 r500");  // the read jumped the two queued writes
  CHECK(rig.done == 1);
}

TEST_CASE("queued writes go in one sweep of offsets from the head, then wrap") {
  DeadlineScheduler::Options o = Quick();
  Rig rig(o);
  rig.Write(20);  // at the device; the head is now past block 20
  for (uint64_t b : {50, 5, 30, 21, 1}) rig.Write(b);
  for (int i = 0; i < 6; i++) rig.Complete();
  CHECK(rig.dev->order() == "w20 w21 w30 w50 w1 w5");
  CHECK(rig.done == 6);
  CHECK(rig.sched->stats().writes == 6);
}

TEST_CASE("after a read, writes wait for the reader's next read, for a while") {
  Rig rig(Quick());
  rig.Read(100);
  rig.Write(7);
  rig.Complete();  // the read is done; the write is held (anticipation)
  CHECK(rig.dev->order() == "r100");
  CHECK(rig.sched->stats().anticipation_waits == 1);
  rig.Read(900);  // the reader comes back within the window: it goes first
  CHECK(rig.dev->order() == "r100 r900");
  rig.Complete();
  CHECK(rig.dev->order() == "r100 r900");  // still anticipating
  // No further read: the window ends and the write goes, by the timer alone.
  uint64_t start = NowNanos();
  rig.reactor->RunUntil([&] { return rig.dev->at_device() == 1; });
  CHECK(NowNanos() - start >= 15'000'000);
  CHECK(rig.dev->order() == "r100 r900 w7");
}

TEST_CASE("reads that never stop still let a batch of writes through every write_expire") {
  DeadlineScheduler::Options o = Quick();
  o.write_expire_ns = 30'000'000;  // 30 ms
  Rig rig(o);
  rig.Read(999);
  for (uint64_t b : {1, 2, 3}) rig.Write(b);
  rig.Complete();  // the read is done; the writes are held for the reader
  uint64_t start = NowNanos();
  // A reader that always has its next read queued.
  int reads = 0;
  while (NowNanos() - start < 100'000'000 && reads < 1000000) {
    rig.Read(1000 + reads++ % 64);
    rig.Complete();
  }
  std::string order = rig.dev->order();
  INFO(order.substr(0, 400));
  // Batches of two, 30 ms apart: w1 w2, then w3; reads before and between.
  CHECK(rig.sched->stats().write_batches == 2);
  size_t first = order.find("w1 w2"), second = order.find("w3");
  REQUIRE(first != std::string::npos);
  REQUIRE(second != std::string::npos);
  CHECK(order.find("r1010") < first);
  CHECK(order.find(" r", first) < second);
}

TEST_CASE("a flush passes the queue, discards and write-zeroes queue as writes") {
  Rig rig(Quick());
  rig.Write(3);
  std::optional<Status> flushed, discarded;
  rig.sched->Discard(0, 4096, [&](Status st) { discarded = st; });
  rig.sched->Flush([&](Status st) { flushed = st; });
  CHECK(rig.dev->order() == "w3 f0");  // the flush went at once, the discard waits
  rig.dev->CompleteNext();             // w3
  rig.Turn();
  rig.dev->CompleteNext();  // the flush
  rig.Turn();
  REQUIRE(flushed.has_value());
  CHECK(flushed->ok());
  CHECK(rig.dev->order() == "w3 f0 w0");
  rig.Complete();
  REQUIRE(discarded.has_value());
}

TEST_CASE("a request dispatched from another reactor completes on its submitter's") {
  auto reactor = BoundReactor();
  auto d = OpenDevice("sas:mem:64M");
  REQUIRE(d.ok());
  DeadlineScheduler sched(std::move(d).value());
  AlignedBuffer a(4096), b(4096);
  std::atomic<bool> b_done{false}, b_submitted{false}, a_finished{false};
  std::thread::id b_thread, b_ran_on;
  bool a_done = false;
  // This thread's write occupies the device; the other thread's read is
  // queued behind it and dispatched from this thread's completion.
  sched.Write(0, 4096, a.data(), 0, [&](Status st) {
    CHECK(st.ok());
    a_done = true;
  });
  std::thread other([&] {
    auto r = BoundReactor();
    b_thread = std::this_thread::get_id();
    sched.Read(32 << 20, 4096, b.data(), [&](Status st) {
      CHECK(st.ok());
      b_ran_on = std::this_thread::get_id();
      b_done = true;
    });
    b_submitted = true;
    r->RunUntil([&] { return b_done.load(); });
    // This reactor must outlive the other thread's Post() to it.
    while (!a_finished) std::this_thread::yield();
  });
  while (!b_submitted) std::this_thread::yield();  // the write is still at the device
  CHECK(sched.stats().queued == 1);
  // Turns without sleeping: the last event is on the other thread's reactor.
  while (!(a_done && b_done.load())) reactor->RunOnce(false);
  a_finished = true;
  other.join();
  CHECK(b_ran_on == b_thread);
}

TEST_CASE("a request dispatched from another reactor's completion goes to the device on its own") {
  // This thread's write occupies the device (depth 1); the other thread's
  // write queues behind it and is dispatched from this thread's
  // completion. This reactor then stops running, as the writeback thread's
  // sleeps between passes: the other write must complete all the same.
  // Broken on purpose to see this fail: Dispatch submitting to the device
  // below on the reactor it runs on (the merged epochs tree did): the
  // other write's completion (the spindle model's timer) then waited on
  // this reactor's ring — 120-writeback-crash's hang, where a client
  // write-through sat on the sleeping writeback ring holding its range.
  auto reactor = BoundReactor();
  auto d = OpenDevice("sas:mem:64M");
  REQUIRE(d.ok());
  DeadlineScheduler sched(std::move(d).value());
  AlignedBuffer a(4096), b(4096);
  std::atomic<bool> b_submitted{false}, b_done{false}, release{false};
  bool a_done = false;
  sched.Write(0, 4096, a.data(), 0, [&](Status st) {
    CHECK(st.ok());
    a_done = true;
  });
  std::thread other([&] {
    auto r = BoundReactor();
    sched.Write(32 << 20, 4096, b.data(), 0, [&](Status st) {
      CHECK(st.ok());
      b_done = true;
    });
    b_submitted = true;
    // Runs until told: this reactor must outlive any Post() to it.
    while (!release) {
      r->RunOnce(false);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  while (!b_submitted) std::this_thread::yield();
  reactor->RunUntil([&] { return a_done; });
  // This reactor is not run now.
  uint64_t deadline = NowNanos() + 3'000'000'000ull;
  while (!b_done && NowNanos() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(b_done.load());
  while (!b_done) reactor->RunOnce(false);  // the broken form: let it finish to end cleanly
  release = true;
  other.join();
}

TEST_CASE("held writes go after the anticipation even when the reader's reactor is gone") {
  // The read finishes on its own reactor, whose thread then exits; the
  // wake-up for the held write must not die with it.
  auto reactor = BoundReactor();
  auto d = std::make_unique<HeldDevice>();
  HeldDevice* dev = d.get();
  DeadlineScheduler sched(std::move(d), Quick());
  AlignedBuffer a(4096), b(4096);
  std::atomic<bool> read_submitted{false}, write_submitted{false};
  bool write_done = false;
  std::thread reader([&] {
    auto r = BoundReactor();
    bool read_done = false;
    sched.Read(100 * 4096, 4096, b.data(), [&](Status) { read_done = true; });
    read_submitted = true;
    while (!write_submitted) std::this_thread::yield();
    dev->CompleteNext();  // the read's completion runs on this reactor
    r->RunUntil([&] { return read_done; });
  });
  while (!read_submitted) std::this_thread::yield();
  sched.Write(7 * 4096, 4096, a.data(), 0, [&](Status st) {
    CHECK(st.ok());
    write_done = true;
  });
  write_submitted = true;
  reader.join();  // its reactor is destroyed
  uint64_t deadline = NowNanos() + 2'000'000'000ull;
  while (dev->at_device() == 0 && NowNanos() < deadline) reactor->RunOnce(false);
  CHECK(dev->order() == "r100 w7");
  REQUIRE(dev->at_device() == 1);
  dev->CompleteNext();
  reactor->RunUntil([&] { return write_done; });
}

TEST_CASE("data through the scheduler over a spindle model reads back") {
  auto reactor = BoundReactor();
  auto d = OpenDevice("sas:mem:64M");
  REQUIRE(d.ok());
  DeadlineScheduler sched(std::move(d).value());
  constexpr int kN = 24;
  std::vector<AlignedBuffer> bufs;
  int done = 0;
  for (int i = 0; i < kN; i++) {
    bufs.emplace_back(8192);
    FillPattern(bufs.back().data(), 8192, i);
    uint64_t off = (static_cast<uint64_t>(i) * 7919 % 4096) * 8192;
    sched.Write(off, 8192, bufs.back().data(), 0, [&](Status st) {
      CHECK(st.ok());
      done++;
    });
  }
  reactor->RunUntil([&] { return done == kN; });
  for (int i = 0; i < kN; i++) {
    uint64_t off = (static_cast<uint64_t>(i) * 7919 % 4096) * 8192;
    INFO("write " << i);
    CHECK(Diff(ReadBytes(sched, off, 8192), Pattern(8192, i)).empty());
  }
  CHECK(sched.stats().queued == 0);
  CHECK(sched.rotational());
}

TEST_CASE("the backing scheduler mode auto schedules a modelled spindle only") {
  auto reactor = BoundReactor();
  auto sas = WithScheduler(std::move(OpenDevice("sas:mem:1M")).value(), "auto");
  REQUIRE(sas.ok());
  CHECK(dynamic_cast<DeadlineScheduler*>(sas->get()) != nullptr);
  CHECK_THAT((*sas)->Describe(), Catch::Contains("deadline scheduler (depth 1)"));
  auto mem = WithScheduler(std::move(OpenDevice("mem:1M")).value(), "auto");
  REQUIRE(mem.ok());
  CHECK(dynamic_cast<DeadlineScheduler*>(mem->get()) == nullptr);
  auto forced = WithScheduler(std::move(OpenDevice("mem:1M")).value(), "deadline");
  REQUIRE(forced.ok());
  CHECK(dynamic_cast<DeadlineScheduler*>(forced->get()) != nullptr);
  auto none = WithScheduler(std::move(OpenDevice("sas:mem:1M")).value(), "none");
  REQUIRE(none.ok());
  CHECK(dynamic_cast<DeadlineScheduler*>(none->get()) == nullptr);
  auto bad = WithScheduler(std::move(OpenDevice("mem:1M")).value(), "cfq");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("'cfq'"));
}

TEST_CASE("a write turn takes a quarter of the writes waiting, within its bounds") {
  DeadlineScheduler::Options o = Quick();
  o.write_expire_ns = 20'000'000;  // 20 ms
  o.write_batch = 2;
  o.max_write_batch = 8;
  for (auto [queued, want] : {std::pair<int, size_t>{4, 2}, {24, 6}, {100, 8}}) {
    INFO(queued << " writes waiting");
    Rig rig(o);
    rig.Read(999);
    for (int b = 0; b < queued; b++) rig.Write(b);
    rig.Complete();  // the writes are held for the reader
    uint64_t start = NowNanos();
    int reads = 0;
    while (rig.sched->stats().write_batches == 0 && NowNanos() - start < 1'000'000'000) {
      rig.Read(1000 + reads++ % 64);
      rig.Complete();
    }
    REQUIRE(rig.sched->stats().write_batches == 1);
    for (int i = 0; i < 200 && rig.dev->at_device() > 0; i++) rig.Complete();  // drain the batch
    // The writes dispatched in the first turn: a run of "w" in the order.
    std::string order = rig.dev->order();
    size_t first = order.find(" w");
    REQUIRE(first != std::string::npos);
    size_t run = 0;
    for (size_t p = first; p < order.size() && order.compare(p, 2, " w") == 0; p = order.find(' ', p + 1)) {
      run++;
      if (p == std::string::npos) break;
    }
    CHECK(run == want);
  }
}
