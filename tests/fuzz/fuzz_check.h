// SPDX-License-Identifier: Apache-2.0
// FUZZ_CHECK: an invariant of a fuzz target; a violation aborts, which
// libFuzzer records as a crash with the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__,    \
                   __LINE__, #cond);                                      \
      std::abort();                                                       \
    }                                                                     \
  } while (0)
