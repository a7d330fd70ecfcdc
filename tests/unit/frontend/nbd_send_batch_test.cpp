// SPDX-License-Identifier: Apache-2.0
// The NBD connection's reply batching (NbdConnection::SendBatchHasRoom):
// replies ready together share a sendmsg, but a batch stops at
// kNbdSendBatchBytes, so large replies go one per sendmsg and the reactor
// reads the next requests between them (the 1 MiB convoy of issue 28).
#include "frontend/nbd_connection.h"

#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

using namespace ubcache;

namespace {

// The sendmsg sizes in which `n` read replies of `data` bytes each, all
// ready at once, leave: SendNow's loop, reply by reply.
std::vector<size_t> Sends(size_t n, size_t data) {
  std::vector<size_t> sends;
  size_t i = 0;
  while (i < n) {
    size_t iovs = 0, bytes = 0;
    while (i < n && NbdConnection::SendBatchHasRoom(iovs, bytes)) {
      iovs += 2;  // header, data
      bytes += 16 + data;
      i++;
    }
    sends.push_back(bytes);
  }
  return sends;
}

}  // namespace

TEST_CASE("nbd: 1 MiB read replies ready together leave one per sendmsg", "[nbd]") {
  std::vector<size_t> sends = Sends(8, 1 << 20);
  REQUIRE(sends.size() == 8);
  for (size_t s : sends) CHECK(s == 16 + (1u << 20));
}

TEST_CASE("nbd: a batch takes replies until it holds the byte bound, the crossing one included", "[nbd]") {
  std::vector<size_t> sends = Sends(8, 192 << 10);  // two make 384 KiB > 256 KiB
  REQUIRE(sends.size() == 4);
  for (size_t s : sends) CHECK(s == 2 * (16 + (192u << 10)));
}

TEST_CASE("nbd: 4 KiB read replies at QD32 leave in one sendmsg", "[nbd]") {
  std::vector<size_t> sends = Sends(32, 4096);
  REQUIRE(sends.size() == 1);
  CHECK(sends[0] == 32 * (16 + 4096));
}

TEST_CASE("nbd: header-only replies (writes) batch up to the iovec limit", "[nbd]") {
  std::vector<size_t> sends;
  size_t i = 0, n = 1000;
  while (i < n) {
    size_t iovs = 0, bytes = 0;
    while (i < n && NbdConnection::SendBatchHasRoom(iovs, bytes)) iovs++, bytes += 16, i++;
    sends.push_back(iovs);
  }
  REQUIRE(sends.size() >= 2);
  CHECK(sends[0] >= 500);  // IOV_MAX-sized batches, not 256 KiB-sized ones
}
