// SPDX-License-Identifier: Apache-2.0
// Human sizes: "4M", "512k", "1.5G", "4096" in, "512 KiB" out. Binary units
// (k = 1024), as bcache and dd use them. Garbage is an error, never zero.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "util/status.h"

namespace ubcache {

// Parses a byte count: digits with an optional fraction and an optional unit
// (b, k/K/KiB, M/MiB, G/GiB, T/TiB; a trailing "B" is allowed). Rejects empty
// input, negative numbers, unknown units, trailing garbage and overflow.
Result<uint64_t> ParseSize(std::string_view text);

// "0 B", "4.0 KiB", "512 KiB", "1.5 GiB": three significant digits at most.
std::string FormatSize(uint64_t bytes);

// Parses an unsigned integer in [min, max]; the error names `what`.
Result<uint64_t> ParseUint(std::string_view text, uint64_t min, uint64_t max,
                           std::string_view what);

}  // namespace ubcache
