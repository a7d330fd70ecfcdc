// SPDX-License-Identifier: Apache-2.0
#include "util/hash.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

using namespace ubcache;

// Vectors published by the xxHash project (cli/xsum_sanity_check.c, v0.8):
// XXH3-64 is an on-disk checksum here, so its values must never change.
TEST_CASE("Hash64 is XXH3-64: published values for fixed inputs") {
  CHECK(Hash64("", 0) == 0x2D06800538D394C2ull);
  CHECK(Hash64("a", 1) == 0xE6C632B61E964E1Full);
  CHECK(Hash64("abc", 3) == 0x78AF5F94892F3950ull);
  CHECK(Hash64("", 0, 0x9E3779B185EBCA8Dull) == 0xA8A6B918B2F0364Aull);
}

TEST_CASE("Hash64 is stable across calls and copies of the input") {
  std::vector<uint8_t> a(4096);
  for (size_t i = 0; i < a.size(); i++) a[i] = static_cast<uint8_t>(i * 31 + 7);
  std::vector<uint8_t> b = a;
  CHECK(Hash64(a.data(), a.size()) == Hash64(b.data(), b.size()));
  CHECK(Hash64(a.data(), a.size(), 5) == Hash64(b.data(), b.size(), 5));
}

TEST_CASE("a different seed gives a different hash") {
  const char msg[] = "ubcache superblock";
  uint64_t h0 = Hash64(msg, sizeof msg, 0);
  uint64_t h1 = Hash64(msg, sizeof msg, 1);
  uint64_t h2 = Hash64(msg, sizeof msg, 2);
  CHECK(h0 != h1);
  CHECK(h1 != h2);
  CHECK(h0 != h2);
}

TEST_CASE("a one-bit change anywhere in a block changes the hash") {
  std::vector<uint8_t> buf(4096, 0xA5);
  uint64_t base = Hash64(buf.data(), buf.size());
  for (size_t pos : {size_t{0}, size_t{1}, size_t{2047}, size_t{4095}}) {
    buf[pos] ^= 1;
    INFO("flipped byte " << pos);
    CHECK(Hash64(buf.data(), buf.size()) != base);
    buf[pos] ^= 1;
  }
  CHECK(Hash64(buf.data(), buf.size()) == base);
}

TEST_CASE("the length is part of the hash: a trailing zero byte changes it") {
  uint8_t buf[16] = {};
  CHECK(Hash64(buf, 15) != Hash64(buf, 16));
}
