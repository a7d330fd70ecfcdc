// SPDX-License-Identifier: Apache-2.0
// XXH3-64, the checksum of every piece of ubcache's own metadata.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ubcache {

uint64_t Hash64(const void* data, size_t len, uint64_t seed = 0);

}  // namespace ubcache
