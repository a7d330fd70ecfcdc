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

struct Batch {
  size_t replies = 0, bytes = 0;
};

// The sendmsgs in which `n` replies of `bytes` bytes and `iovs` iovecs
// each, all ready at once, leave: SendNow's loop, reply by reply.
std::vector<Batch> Sends(size_t n, size_t bytes, size_t iovs) {
  std::vector<Batch> sends;
  size_t i = 0;
  while (i < n) {
    Batch b;
    size_t used = 0;
    while (i < n && NbdConnection::SendBatchHasRoom(used, b.bytes)) {
      used += iovs;
      b.bytes += bytes;
      b.replies++;
      i++;
    }
    sends.push_back(b);
  }
  return sends;
}

// A read reply: the 16-byte header and the data, two iovecs.
std::vector<Batch> ReadReplies(size_t n, size_t data) { return Sends(n, 16 + data, 2); }

}  // namespace

TEST_CASE("nbd: 1 MiB read replies ready together leave one per sendmsg", "[nbd]") {
  std::vector<Batch> sends = ReadReplies(8, 1 << 20);
  REQUIRE(sends.size() == 8);
  for (const Batch& b : sends) CHECK(b.bytes == 16 + (1u << 20));
}

TEST_CASE("nbd: a batch takes replies until it holds the byte bound, the crossing one included", "[nbd]") {
  std::vector<Batch> sends = ReadReplies(8, 192 << 10);  // two make 384 KiB > 256 KiB
  REQUIRE(sends.size() == 4);
  for (const Batch& b : sends) CHECK(b.bytes == 2 * (16 + (192u << 10)));
}

TEST_CASE("nbd: 4 KiB read replies at QD32 leave in one sendmsg", "[nbd]") {
  std::vector<Batch> sends = ReadReplies(32, 4096);
  REQUIRE(sends.size() == 1);
  CHECK(sends[0].bytes == 32 * (16 + 4096));
}

TEST_CASE("nbd: header-only replies (writes) batch up to the iovec limit", "[nbd]") {
  std::vector<Batch> sends = Sends(1000, 16, 1);
  REQUIRE(sends.size() >= 2);
  CHECK(sends[0].replies >= 500);  // IOV_MAX-sized batches, not 256 KiB-sized ones
}
