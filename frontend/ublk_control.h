// SPDX-License-Identifier: Apache-2.0
// UblkControl: the ublk driver's control device, /dev/ublk-control.
//
// Each command is one IORING_OP_URING_CMD on a small private SQE128 ring
// (control commands carry a 32-byte payload, too big for a 64-byte SQE),
// submitted and waited for synchronously: control traffic is a handful of
// commands at start and stop. Some commands block in the kernel until the
// queue threads act (START_DEV and END_USER_RECOVERY wait for every tag's
// first FETCH_REQ; DEL_DEV waits for /dev/ublkcN to be released), so callers
// must have those threads running first.
//
// Errors are one line and say what to do: the driver missing, not root, a
// device id already in use, a kernel without a feature we need.
//
// Thread safety: one thread at a time (the serve command's main thread, or
// UblkServer::UpdateSize under its lock).
#pragma once

#include <liburing.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "frontend/ublk_uapi.h"
#include "util/status.h"

namespace ubcache {

class UblkControl {
 public:
  // Opens /dev/ublk-control; the error names the cause ("modprobe ublk_drv",
  // "needs root").
  static Result<std::unique_ptr<UblkControl>> Open();
  ~UblkControl();
  UblkControl(const UblkControl&) = delete;
  UblkControl& operator=(const UblkControl&) = delete;

  // While a command waits, `interrupted` is polled every 100 ms; when it
  // returns true the wait is abandoned with a Shutdown status.
  void set_interrupt(std::function<bool()> interrupted) { interrupted_ = std::move(interrupted); }

  // The driver's feature bits. UBCACHE_UBLK_HIDE_FEATURES=MASK (hex) hides
  // bits, so tests can play a kernel that lacks them.
  Result<uint64_t> GetFeatures();
  // `info` in: queues, depth, max_io_buf_bytes, dev_id (or ~0u for any),
  // flags. Out: the id the kernel chose.
  Status AddDev(ublk::DevInfo* info);
  Status SetParams(uint32_t dev_id, const ublk::Params& params);
  Result<ublk::DevInfo> GetDevInfo(uint32_t dev_id);
  Result<ublk::Params> GetParams(uint32_t dev_id);
  Status StartDev(uint32_t dev_id);
  Status StopDev(uint32_t dev_id);
  Status DelDev(uint32_t dev_id);
  Status StartUserRecovery(uint32_t dev_id);
  Status EndUserRecovery(uint32_t dev_id);
  // A started device's new size (a multiple of 512); needs kFUpdateSize.
  Status UpdateSize(uint32_t dev_id, uint64_t bytes);

 private:
  UblkControl() = default;
  // The command's result: >= 0, or -errno.
  Result<int> Command(uint32_t op, uint32_t dev_id, void* buf, uint16_t len, uint64_t data0);
  Status Check(const char* what, uint32_t dev_id, Result<int> r);

  int fd_ = -1;
  io_uring ring_{};
  bool ring_ok_ = false;
  std::function<bool()> interrupted_;
};

// "user_recovery, user_recovery_reissue, ..." for logs and errors.
std::string UblkFeatureNames(uint64_t features);

}  // namespace ubcache
