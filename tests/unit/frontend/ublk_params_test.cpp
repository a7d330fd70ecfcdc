// SPDX-License-Identifier: Apache-2.0
// What SET_PARAMS tells the kernel about an export, and the ABI constants
// that must match Linux's ublk_cmd.h.
#include <catch2/catch.hpp>

#include "backend/block_device.h"
#include "frontend/ublk_control.h"
#include "frontend/ublk_server.h"
#include "frontend/ublk_uapi.h"

namespace ubcache {
namespace {

TEST_CASE("ublk params describe the export: sizes, io_opt, write cache with FUA, discard") {
  auto dev = OpenDevice("mem:64M");
  REQUIRE(dev.ok());
  UblkExport e{"x", dev->get(), false, 512 * 1024};
  ublk::Params p = UblkParamsFor(e, 512 * 1024);
  CHECK(p.len == sizeof p);
  CHECK(p.types == (ublk::kParamBasic | ublk::kParamDiscard));
  CHECK((1u << p.basic.logical_bs_shift) == (*dev)->logical_block_size());
  CHECK(p.basic.physical_bs_shift >= 12);
  CHECK(p.basic.io_opt_shift == 19);
  CHECK(p.basic.max_sectors == 1024);
  CHECK(p.basic.dev_sectors == (64u << 20) >> 9);
  CHECK(p.basic.attrs == (ublk::kAttrVolatileCache | ublk::kAttrFua));
  CHECK(p.discard.discard_granularity == (*dev)->logical_block_size());
  CHECK(p.discard.max_discard_sectors > 0);
  CHECK(p.discard.max_write_zeroes_sectors > 0);
  CHECK(p.discard.max_discard_segments == 1);
}

TEST_CASE("a read-only ublk export says so and offers no discard") {
  auto dev = OpenDevice("mem:8M");
  REQUIRE(dev.ok());
  UblkExport e{"ro", dev->get(), true, 0};
  ublk::Params p = UblkParamsFor(e, 256 * 1024);
  CHECK(p.types == ublk::kParamBasic);
  CHECK((p.basic.attrs & ublk::kAttrReadOnly) != 0);
  CHECK(p.basic.io_opt_shift == 0);
  CHECK(p.basic.max_sectors == 512);
}

TEST_CASE("ublk command numbers and user-copy offsets match the kernel's encoding") {
  // _IOR('u', 0x13, 32 bytes) and _IOWR('u', 0x04, 32 bytes), as in ublk_cmd.h.
  CHECK(ublk::kCmdGetFeatures == 0x80207513u);
  CHECK(ublk::kCmdAddDev == 0xc0207504u);
  CHECK(ublk::kIoFetchReq == 0xc0107520u);
  // _IOWR('u', 0x15, 32 bytes): UBLK_U_CMD_UPDATE_SIZE (Linux 6.16), bit 10 its feature.
  CHECK(ublk::kCmdUpdateSize == 0xc0207515u);
  CHECK(ublk::kFUpdateSize == 0x400u);
  CHECK(ublk::kIoCommitAndFetchReq == 0xc0107521u);
  CHECK(ublk::kMaxCmdBufSize == 4096 * 24);
  CHECK(ublk::UserCopyOffset(0, 0) == 0x80000000ull);
  CHECK(ublk::UserCopyOffset(1, 2) == 0x80000000ull + (1ull << 41) + (2ull << 25));
}

TEST_CASE("ublk feature names list the bits in order") {
  CHECK(UblkFeatureNames(0) == "none");
  CHECK(UblkFeatureNames(ublk::kFUserRecovery | ublk::kFUserCopy) == "user_recovery, user_copy");
  CHECK(UblkFeatureNames(ublk::kFUpdateSize) == "update_size");
}

TEST_CASE("a ublk device grows by UPDATE_SIZE only where the kernel offers it, and never shrinks") {
  const uint64_t kMiB = 1 << 20;
  const uint64_t k612 = 0x1fe;  // what Linux 6.12's ublk_drv offers
  auto same = UblkGrowth(k612, 32 * kMiB, 32 * kMiB, "/dev/ublkb0", "disk");
  REQUIRE(same.ok());
  CHECK_FALSE(same->has_value());
  // Whole sectors: a tail under 512 bytes is not exposed.
  auto grow = UblkGrowth(k612 | ublk::kFUpdateSize, 32 * kMiB, 64 * kMiB + 100, "/dev/ublkb0", "disk");
  REQUIRE(grow.ok());
  CHECK(**grow == 64 * kMiB);
  auto old = UblkGrowth(k612, 32 * kMiB, 64 * kMiB, "/dev/ublkb0", "disk");
  REQUIRE_FALSE(old.ok());
  CHECK(old.status().code() == Status::Code::kNotSupported);
  CHECK_THAT(old.status().message(), Catch::Contains("/dev/ublkb0 stays at 32 MiB"));
  CHECK_THAT(old.status().message(), Catch::Contains("lacks UBLK_F_UPDATE_SIZE"));
  CHECK_THAT(old.status().message(), Catch::Contains("export 'disk' has grown to 64 MiB"));
  CHECK(old.status().message().find('\n') == std::string::npos);
  auto shrink = UblkGrowth(k612 | ublk::kFUpdateSize, 32 * kMiB, 16 * kMiB, "/dev/ublkb0", "disk");
  REQUIRE_FALSE(shrink.ok());
  CHECK(shrink.status().code() == Status::Code::kInvalidArgument);
  CHECK_THAT(shrink.status().message(), Catch::Contains("would shrink from 32 MiB to 16 MiB"));
}

}  // namespace
}  // namespace ubcache
