// SPDX-License-Identifier: Apache-2.0
// NbdDevice specifics, against a real nbdkit; the generic contract is in
// block_device_test.cpp.
#include "backend/nbd_device.h"

#include <catch2/catch.hpp>

#include <optional>
#include <thread>

#include "backend/sync_io.h"
#include "device_test_support.h"

using namespace ubcache;
using namespace ubcache::test;

TEST_CASE("an NBD export's size is the server's size") {
  NbdkitServer server("3M");
  auto reactor = BoundReactor();
  auto d = OpenDevice("nbd:" + server.uri());
  REQUIRE(d.ok());
  CHECK((*d)->size() == 3 << 20);
  CHECK((*d)->logical_block_size() >= 512);
  d.value().reset();
}

TEST_CASE("an NBD request larger than the device limit is refused, not sent") {
  NbdkitServer server("64M");
  auto reactor = BoundReactor();
  auto d = OpenDevice("nbd:" + server.uri());
  REQUIRE(d.ok());
  uint64_t len = NbdDevice::kMaxRequest + 4096;
  AlignedBuffer buf(len);
  Status st = SyncRead(**d, 0, len, buf.data());
  CHECK(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Catch::Contains((*d)->spec()));
  // The largest allowed request works.
  CHECK(SyncRead(**d, 0, NbdDevice::kMaxRequest, buf.data()).ok());
  d.value().reset();
}

TEST_CASE("each reactor thread gets its own NBD connection and sees the others' flushed writes") {
  NbdkitServer server("16M");
  auto reactor = BoundReactor();
  auto d = OpenDevice("nbd:" + server.uri());
  REQUIRE(d.ok());
  BlockDevice& dev = **d;
  REQUIRE(WriteBytes(dev, 0, Pattern(8192, 1)).ok());
  REQUIRE(SyncFlush(dev).ok());

  std::optional<std::vector<uint8_t>> seen;
  std::optional<Status> wrote;
  std::thread other([&] {
    auto r2 = BoundReactor();
    seen = ReadBytes(dev, 0, 8192);
    wrote = WriteBytes(dev, 8192, Pattern(4096, 2), kIoFua);
    // This thread's connection closes when the device is destroyed, which
    // needs its polls gone: drop the reactor (and its ring) first.
    r2.reset();
  });
  other.join();
  REQUIRE(seen.has_value());
  CHECK(Diff(*seen, Pattern(8192, 1)) == "");
  REQUIRE(wrote.has_value());
  CHECK(wrote->ok());
  CHECK(Diff(ReadBytes(dev, 8192, 4096), Pattern(4096, 2)) == "");
  d.value().reset();
}

TEST_CASE("a request to an NBD server that has gone away fails instead of hanging") {
  auto server = std::make_unique<NbdkitServer>("16M");
  auto reactor = BoundReactor();
  auto d = OpenDevice("nbd:" + server->uri());
  REQUIRE(d.ok());
  REQUIRE(WriteBytes(**d, 0, Pattern(4096, 1)).ok());
  server->Kill(SIGKILL);
  AlignedBuffer buf(4096);
  Status st = SyncRead(**d, 0, 4096, buf.data());
  CHECK_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains((*d)->spec()));
  d.value().reset();
  reactor.reset();
}
