// SPDX-License-Identifier: Apache-2.0
// Time bounds in unit tests are for optimized builds; sanitizers slow code
// down several times, so a bound is multiplied by kTimingScale there (the
// tests still check behaviour; only how fast it must be is relaxed).
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UBCACHE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UBCACHE_TEST_SANITIZED 1
#endif
#endif

namespace ubcache::test {

#ifdef UBCACHE_TEST_SANITIZED
inline constexpr unsigned kTimingScale = 10;
#else
inline constexpr unsigned kTimingScale = 1;
#endif

}  // namespace ubcache::test
