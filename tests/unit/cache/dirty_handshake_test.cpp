// SPDX-License-Identifier: Apache-2.0
// The backing superblock's clean <-> dirty handshake (ordering rule 7): a
// writeback-mode write never goes dirty unseen by a thread marking the
// superblock clean, and a write that finds it not dirty waits for it.
// writeback_test.cpp checks the rule end to end across a power cut.
#include "cache/dirty_handshake.h"

#include <catch2/catch.hpp>
#include <memory>

#include "backend/reactor.h"

namespace ubcache {
namespace {

struct Rig {
  std::unique_ptr<Reactor> reactor = std::move(Reactor::Create().value());
  Rig() { reactor->Bind(); }
  void Settle() {
    for (int i = 0; i < 4; i++) reactor->RunOnce(false);
  }
};

TEST_CASE("a dirty write waits for the backing superblock to be marked dirty, then goes on") {
  Rig r;
  DirtyHandshake h(false);
  int retried = 0;
  bool refused = true;
  bool went_on = h.Enter([&]() -> Callback<void(bool)> {
    return [&](bool ref) {
      retried++;
      refused = ref;
    };
  });
  REQUIRE_FALSE(went_on);
  CHECK(h.dirty_requested());
  CHECK(h.TakeDirtyRequest());
  r.Settle();
  CHECK(retried == 0);  // not before the superblock says dirty
  h.SetDirtyOk(true);
  r.Settle();
  CHECK(retried == 1);
  CHECK_FALSE(refused);
  CHECK_FALSE(h.WritesInFlight());  // the parked pass counted itself out
}

TEST_CASE("a dirty write that waited goes through when marking the superblock dirty failed") {
  Rig r;
  DirtyHandshake h(false);
  bool refused = false;
  REQUIRE_FALSE(
      h.Enter([&]() -> Callback<void(bool)> { return [&](bool ref) { refused = ref; }; }));
  REQUIRE(h.TakeDirtyRequest());
  h.SetDirtyOk(false);
  r.Settle();
  CHECK(refused);
}

TEST_CASE("the superblock is never marked clean under a dirty write the thread did not see") {
  Rig r;
  DirtyHandshake h(true);
  // A write that entered first is seen by the thread closing for clean.
  bool made = false;
  REQUIRE(h.Enter([&]() -> Callback<void(bool)> {
    made = true;
    return [](bool) {};
  }));
  CHECK_FALSE(made);  // the retry is only made for a write that parks
  h.CloseForClean();
  CHECK(h.WritesInFlight());  // so the thread does not mark clean now
  h.Leave();
  CHECK_FALSE(h.WritesInFlight());
  // A write that enters after the close parks instead of going dirty.
  bool ran = false;
  CHECK_FALSE(h.Enter([&]() -> Callback<void(bool)> { return [&](bool) { ran = true; }; }));
  CHECK(h.dirty_requested());
  CHECK(
      h.WritesInFlight());  // still counted while parked: the thread marks dirty for it, not clean
  r.Settle();
  CHECK_FALSE(ran);
  h.TakeDirtyRequest();
  h.SetDirtyOk(true);
  r.Settle();
  CHECK(ran);
  CHECK_FALSE(h.WritesInFlight());
}

}  // namespace
}  // namespace ubcache
