// SPDX-License-Identifier: Apache-2.0
// RangeGuard's range rules, alone (no cache set): a foreground backing write
// waits for writeback over its range, a foreground write over dirty data
// keeps writeback off its range, and waiters resume on their own reactor.
// The clean-copy rule is checked end to end in writeback_test.cpp ("a clean
// copy never outlives backing data newer than it across a power cut").
#include "cache/range_guard.h"

#include <catch2/catch.hpp>
#include <memory>
#include <thread>

#include "backend/reactor.h"

namespace ubcache {
namespace {

struct Rig {
  std::unique_ptr<Reactor> reactor = std::move(Reactor::Create().value());
  RangeGuard guard{"test", nullptr, 0};
  Rig() { reactor->Bind(); }
  // Runs what was posted to this reactor so far.
  void Settle() {
    for (int i = 0; i < 4; i++) reactor->RunOnce(false);
  }
};

TEST_CASE(
    "a foreground backing write waits for writeback in flight over its range, and only that") {
  Rig r;
  REQUIRE(r.guard.ClaimForWriteback(0, 1 << 20));
  bool overlapping = false, elsewhere = false;
  r.guard.AfterWriteback(4096, 8192, [&] { overlapping = true; });
  r.guard.AfterWriteback(1 << 20, (1 << 20) + 4096, [&] { elsewhere = true; });
  r.Settle();
  CHECK(elsewhere);
  CHECK_FALSE(overlapping);  // writeback's older copy could still land after it
  r.guard.ReleaseWriteback(0, 1 << 20);
  r.Settle();
  CHECK(overlapping);
  CHECK(r.guard.writeback_claims() == 0);
}

TEST_CASE(
    "writeback skips a range a foreground write over dirty data holds, until it is released") {
  Rig r;
  bool held = false;
  r.guard.HoldForeground(0, 4096, [&] { held = true; });
  REQUIRE(held);
  CHECK_FALSE(
      r.guard.ClaimForWriteback(0, 64 << 10));  // would write back the dirty copy being replaced
  CHECK(r.guard.ClaimForWriteback(64 << 10, 128 << 10));
  r.guard.ReleaseForeground(0, 4096);
  CHECK(r.guard.ClaimForWriteback(0, 64 << 10));
}

TEST_CASE(
    "a foreground write over dirty data that waited for writeback holds its range from the moment "
    "it goes on") {
  Rig r;
  REQUIRE(r.guard.ClaimForWriteback(0, 64 << 10));
  bool held = false;
  r.guard.HoldForeground(0, 4096, [&] { held = true; });
  r.Settle();
  CHECK_FALSE(held);
  r.guard.ReleaseWriteback(0, 64 << 10);
  // Held before its callback runs: a claim in between must not slip in.
  CHECK_FALSE(r.guard.ClaimForWriteback(0, 64 << 10));
  r.Settle();
  CHECK(held);
}

TEST_CASE("a waiter released from another thread resumes on the reactor it waited on") {
  Rig r;
  REQUIRE(r.guard.ClaimForWriteback(0, 4096));
  std::thread::id ran_on;
  bool ran = false;
  r.guard.AfterWriteback(0, 4096, [&] {
    ran_on = std::this_thread::get_id();
    ran = true;
  });
  std::thread([&] { r.guard.ReleaseWriteback(0, 4096); }).join();
  r.reactor->RunUntil([&] { return ran; });
  CHECK(ran_on == std::this_thread::get_id());
}

TEST_CASE(
    "rule 5's step with no dirty data and nothing dropped issues at once when no writeback "
    "overlaps") {
  Rig r;
  bool issued = false;
  r.guard.BeforeBackingWrite(0, 4096, false, false, [&] { issued = true; });
  CHECK(issued);
  // Over dirty data it also holds the range until released.
  bool issued2 = false;
  r.guard.BeforeBackingWrite(0, 4096, true, false, [&] { issued2 = true; });
  CHECK(issued2);
  CHECK_FALSE(r.guard.ClaimForWriteback(0, 4096));
  r.guard.ReleaseForeground(0, 4096);
  CHECK(r.guard.ClaimForWriteback(0, 4096));
}

}  // namespace
}  // namespace ubcache
