// SPDX-License-Identifier: Apache-2.0
#include "util/hash.h"

#include <xxhash.h>

namespace ubcache {

uint64_t Hash64(const void* data, size_t len, uint64_t seed) {
  return XXH3_64bits_withSeed(data, len, seed);
}

}  // namespace ubcache
