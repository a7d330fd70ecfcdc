// SPDX-License-Identifier: Apache-2.0
#include "util/size.h"

#include <catch2/catch.hpp>

using namespace ubcache;

TEST_CASE("human sizes parse with binary units") {
  CHECK(ParseSize("4096").value() == 4096);
  CHECK(ParseSize("512k").value() == 512 * 1024);
  CHECK(ParseSize("4M").value() == 4ull << 20);
  CHECK(ParseSize("1.5G").value() == 3ull << 29);
  CHECK(ParseSize("2GiB").value() == 2ull << 30);
  CHECK(ParseSize("1T").value() == 1ull << 40);
}

TEST_CASE("garbage sizes are errors, never zero") {
  for (const char* bad : {"", "abc", "4X", "-1", "1.", "4M4", "1.5", "99999999999999999999",
                          "20000000000000T"}) {
    INFO(bad);
    CHECK_FALSE(ParseSize(bad).ok());
  }
}

TEST_CASE("sizes print with three significant digits") {
  CHECK(FormatSize(0) == "0 B");
  CHECK(FormatSize(512) == "512 B");
  CHECK(FormatSize(4096) == "4 KiB");
  CHECK(FormatSize(512 * 1024) == "512 KiB");
  CHECK(FormatSize(3ull << 29) == "1.50 GiB");
}
