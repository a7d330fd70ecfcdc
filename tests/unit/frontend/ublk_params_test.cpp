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
  CHECK(ublk::kIoCommitAndFetchReq == 0xc0107521u);
  CHECK(ublk::kMaxCmdBufSize == 4096 * 24);
  CHECK(ublk::UserCopyOffset(0, 0) == 0x80000000ull);
  CHECK(ublk::UserCopyOffset(1, 2) == 0x80000000ull + (1ull << 41) + (2ull << 25));
}

TEST_CASE("ublk feature names list the bits in order") {
  CHECK(UblkFeatureNames(0) == "none");
  CHECK(UblkFeatureNames(ublk::kFUserRecovery | ublk::kFUserCopy) == "user_recovery, user_copy");
}

}  // namespace
}  // namespace ubcache
