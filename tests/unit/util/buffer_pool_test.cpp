// SPDX-License-Identifier: Apache-2.0
#include "util/buffer_pool.h"

#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <utility>

using namespace ubcache;

TEST_CASE("buffer pool hands out aligned buffers of at least the asked size") {
  BufferPool pool;
  for (size_t size : {1ul, 512ul, 4096ul, 5000ul, 65536ul, 1ul << 20, 3ul << 20}) {
    size_t cap = 0;
    uint8_t* p = pool.Get(size, &cap);
    INFO(size);
    CHECK(cap >= size);
    CHECK(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
    std::memset(p, 0xab, size);  // writable over the whole size
    pool.Put(p, cap);
  }
}

TEST_CASE("buffer pool reuses a returned buffer of the same class") {
  BufferPool pool;
  size_t cap = 0;
  uint8_t* a = pool.Get(4096, &cap);
  pool.Put(a, cap);
  size_t cap2 = 0;
  uint8_t* b = pool.Get(3000, &cap2);
  CHECK(a == b);
  CHECK(cap2 == cap);
  pool.Put(b, cap2);
}

TEST_CASE("large buffers are carved from 2 MiB-aligned slabs and never overlap") {
  BufferPool pool;
  std::set<uint8_t*> seen;
  std::vector<std::pair<uint8_t*, size_t>> held;
  for (int i = 0; i < 6; i++) {
    size_t cap = 0;
    uint8_t* p = pool.Get(1 << 20, &cap);
    CHECK(cap == (1u << 20));
    // A 1 MiB buffer from a slab starts on a 1 MiB boundary inside a 2 MiB-aligned slab.
    CHECK(reinterpret_cast<uintptr_t>(p) % (1 << 20) == 0);
    CHECK(seen.insert(p).second);
    std::memset(p, i, cap);
    held.push_back({p, cap});
  }
  for (auto [p, cap] : held) pool.Put(p, cap);
}

TEST_CASE("past the slab budget a buffer is a mapping of its own, unmapped when not kept idle") {
  // Every class up to 2 MiB comes from slabs; past kMaxSlabBytes a buffer
  // is its own mapping (never malloc's heap, whose freed pages a locked
  // daemon cannot give back), and a Put beyond the idle limit unmaps it.
  BufferPool pool;
  std::vector<uint8_t*> slab;
  size_t cap = 0;
  for (size_t i = 0; i < BufferPool::kMaxSlabBytes / 4096; i++) slab.push_back(pool.Get(4096, &cap));
  std::set<uintptr_t> slabs;
  for (uint8_t* p : slab) slabs.insert(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t{BufferPool::kSlabSize} - 1));
  CHECK(slabs.size() == BufferPool::kMaxSlabBytes / BufferPool::kSlabSize);  // small buffers share slabs

  uint8_t* own = pool.Get(4096, &cap);
  CHECK(cap == 4096);
  CHECK(slabs.count(reinterpret_cast<uintptr_t>(own) & ~(uintptr_t{BufferPool::kSlabSize} - 1)) == 0);
  std::memset(own, 1, cap);
  for (uint8_t* p : slab) pool.Put(p, 4096);  // far past the idle limit of the class
  pool.Put(own, cap);
  unsigned char vec = 0;
  CHECK(mincore(own, 4096, &vec) == -1);  // unmapped: ENOMEM
  CHECK(errno == ENOMEM);
  CHECK(mincore(slab.front(), 4096, &vec) == 0);  // slab memory stays with the pool
}

TEST_CASE("a pooled buffer goes back to its class when destroyed, and is handed out again") {
  // On a thread of its own: a fresh pool, so nothing else's buffers interfere.
  std::thread([] {
    uint8_t* first = nullptr;
    {
      PooledBuffer b(1 << 20);
      REQUIRE(b.data() != nullptr);
      CHECK(b.size() == size_t{1} << 20);
      first = b.data();
      PooledBuffer moved(std::move(b));
      CHECK(moved.data() == first);
      CHECK(b.data() == nullptr);
    }
    // The same class gets it back (a class of its own: not a 4 KiB one).
    PooledBuffer again(1 << 20);
    CHECK(again.data() == first);
    PooledBuffer small(4096);
    CHECK(small.data() != first);
  }).join();
}
