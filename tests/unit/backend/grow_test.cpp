// SPDX-License-Identifier: Apache-2.0
// BlockDevice::Grow: a device stack follows its storage's new size from the
// bottom up, refuses to shrink, and devices whose size cannot change keep it.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <string>

#include "backend/block_device.h"
#include "backend/deadline_scheduler.h"
#include "backend/offset_device.h"
#include "device_test_support.h"

using namespace ubcache;
using namespace ubcache::test;

namespace {

constexpr uint64_t kMiB = 1 << 20;

void Truncate(const TempFile& f, uint64_t size) { REQUIRE(truncate(f.path().c_str(), static_cast<off_t>(size)) == 0); }

}  // namespace

TEST_CASE("a grown file is taken up by the stack above it, bottom first") {
  auto reactor = BoundReactor();
  TempFile file(8 * kMiB);
  auto raw = OpenDevice(file.path());
  REQUIRE(raw.ok());
  OffsetDevice window(raw->get(), 8192);
  auto top = WithScheduler(std::make_unique<OffsetDevice>(raw->get(), 8192), "deadline");
  REQUIRE(top.ok());
  BlockDevice& dev = **top;
  REQUIRE(dev.size() == 8 * kMiB - 8192);
  const uint64_t old_end = dev.size();

  // Past the end before, fine after.
  CHECK(WriteBytes(dev, old_end, Pattern(4096, 1)).IsNoSpace());
  Truncate(file, 16 * kMiB + 100);  // a partial last block is not addressable
  auto grown = dev.Grow();
  INFO(grown.status().ToString());
  REQUIRE(grown.ok());
  CHECK(*grown == 16 * kMiB - 8192);
  CHECK(dev.size() == 16 * kMiB - 8192);
  CHECK((*raw)->size() == 16 * kMiB);  // the layer below grew too
  CHECK(WriteBytes(dev, old_end, Pattern(4096, 1)).ok());
  CHECK(Diff(ReadBytes(dev, old_end, 4096), Pattern(4096, 1)) == "");
  CHECK(Diff(ReadBytes(**raw, old_end + 8192, 4096), Pattern(4096, 1)) == "");
  CHECK(WriteBytes(dev, dev.size(), Pattern(4096, 2)).IsNoSpace());

  // Unchanged storage: the same size again.
  auto again = dev.Grow();
  REQUIRE(again.ok());
  CHECK(*again == 16 * kMiB - 8192);
}

TEST_CASE("a shrunk file is refused with both sizes named, and no layer changes") {
  auto reactor = BoundReactor();
  TempFile file(16 * kMiB);
  auto raw = OpenDevice(file.path());
  REQUIRE(raw.ok());
  OffsetDevice dev(raw->get(), 8192);
  Truncate(file, 8 * kMiB);
  auto r = dev.Grow();
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Status::Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("shrinking is not supported"));
  CHECK_THAT(r.status().message(), Catch::Contains(file.path()));
  CHECK_THAT(r.status().message(), Catch::Contains("16777216 to 8388608 bytes"));
  CHECK((*raw)->size() == 16 * kMiB);
  CHECK(dev.size() == 16 * kMiB - 8192);
}

TEST_CASE("devices whose size cannot change keep it: mem, fault and spindle models over mem") {
  auto reactor = BoundReactor();
  for (std::string spec : {"mem:4M", "fault:mem:4M", "sas:mem:4M"}) {
    INFO(spec);
    auto dev = OpenDevice(spec);
    REQUIRE(dev.ok());
    auto r = (*dev)->Grow();
    REQUIRE(r.ok());
    CHECK(*r == 4 * kMiB);
    CHECK((*dev)->size() == 4 * kMiB);
  }
}

TEST_CASE("fault and spindle wrappers pass a grown file through") {
  auto reactor = BoundReactor();
  TempFile file(4 * kMiB);
  for (std::string prefix : {"fault:", "sas:"}) {
    INFO(prefix);
    Truncate(file, 4 * kMiB);
    auto dev = OpenDevice(prefix + file.path());
    REQUIRE(dev.ok());
    Truncate(file, 6 * kMiB);
    auto r = (*dev)->Grow();
    REQUIRE(r.ok());
    CHECK(*r == 6 * kMiB);
    CHECK(WriteBytes(**dev, 5 * kMiB, Pattern(4096, 3)).ok());
    CHECK(Diff(ReadBytes(**dev, 5 * kMiB, 4096), Pattern(4096, 3)) == "");
  }
}
