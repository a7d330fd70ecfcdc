// SPDX-License-Identifier: Apache-2.0
// Helpers for the on-disk format fuzz targets.
//
// Every format is checksummed, and random bytes never pass a checksum: a
// fuzzer left alone would test "bad csum" and nothing past it. So each
// target reads a flags byte first, and with kReseal it rewrites the
// checksums the way doc/format.md defines them before decoding — the
// decoder's field checks then see every mutation. The reseal functions
// here are written from doc/format.md, not shared with the encoders, so
// they also check that the document and the code agree.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "util/endian.h"
#include "util/hash.h"
#include "util/status.h"
#include "tests/fuzz/fuzz_check.h"

namespace ubcache::fuzz {

inline constexpr uint8_t kReseal = 1;     // recompute checksums before decoding
inline constexpr uint8_t kTrustIds = 2;   // take set id, address etc. from the input itself

// The input after its flags byte, cut or zero-padded to `len` bytes.
inline std::vector<uint8_t> Block(const uint8_t* data, size_t size, size_t len) {
  std::vector<uint8_t> b(len, 0);
  std::memcpy(b.data(), data, std::min(size, len));
  return b;
}

// A decoder's error must say what failed: a Corruption (or InvalidArgument)
// with a message, never an OK without a value or an empty message.
inline void CheckError(const Status& st) {
  FUZZ_CHECK(!st.ok());
  FUZZ_CHECK(!st.message().empty());
}

// XXH3-64 of [from, to) stored little-endian at `at`, when the range fits.
inline void ResealRange(uint8_t* p, size_t len, size_t at, size_t from, size_t to) {
  if (to > len || from > to || at + 8 > len) return;
  StoreLE64(p + at, Hash64(p + from, to - from));
}

}  // namespace ubcache::fuzz
