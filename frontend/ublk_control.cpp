// SPDX-License-Identifier: Apache-2.0
#include "frontend/ublk_control.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace ubcache {

namespace {

constexpr const char* kControlPath = "/dev/ublk-control";

}  // namespace

std::string UblkFeatureNames(uint64_t f) {
  static const char* const kNames[] = {"zero_copy",     "comp_in_task",          "need_get_data",
                                       "user_recovery", "user_recovery_reissue", "unprivileged_dev",
                                       "cmd_ioctl_encode", "user_copy",          "zoned",
                                       "user_recovery_fail_io", "update_size"};
  std::string s;
  const char* sep = "";
  for (unsigned i = 0; i < sizeof kNames / sizeof kNames[0]; i++) {
    if (f & (1ull << i)) {
      s += sep;
      s += kNames[i];
      sep = ", ";
    }
  }
  return s.empty() ? "none" : s;
}

Result<std::unique_ptr<UblkControl>> UblkControl::Open() {
  std::unique_ptr<UblkControl> c(new UblkControl());
  c->fd_ = open(kControlPath, O_RDWR | O_CLOEXEC);
  if (c->fd_ < 0) {
    int e = errno;
    if (e == ENOENT || e == ENODEV || e == ENXIO)
      return Status::NotFound(std::string("ublk: ") + kControlPath +
                              " does not exist: the ublk_drv kernel module is not loaded "
                              "(modprobe ublk_drv)");
    if (e == EACCES || e == EPERM)
      return Status::Permission(std::string("ublk: ") + kControlPath +
                                ": permission denied: creating ublk devices needs root "
                                "(CAP_SYS_ADMIN)");
    return Status::FromErrno(e, kControlPath);
  }
  int ret = io_uring_queue_init(8, &c->ring_, IORING_SETUP_SQE128);
  if (ret < 0) return Status::FromErrno(ret, "ublk: io_uring_queue_init(SQE128)");
  c->ring_ok_ = true;
  return c;
}

UblkControl::~UblkControl() {
  if (ring_ok_) io_uring_queue_exit(&ring_);
  if (fd_ >= 0) close(fd_);
}

Result<int> UblkControl::Command(uint32_t op, uint32_t dev_id, void* buf, uint16_t len,
                                 uint64_t data0) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) return Status::Busy("ublk: control ring full");
  std::memset(sqe, 0, 2 * sizeof *sqe);  // an SQE128 slot
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd_;
  sqe->cmd_op = op;
  auto* cmd = reinterpret_cast<ublk::CtrlCmd*>(sqe->cmd);
  cmd->dev_id = dev_id;
  cmd->queue_id = 0xffff;
  cmd->addr = reinterpret_cast<uintptr_t>(buf);
  cmd->len = len;
  cmd->data[0] = data0;
  int ret = io_uring_submit(&ring_);
  if (ret < 0) return Status::FromErrno(ret, "ublk: io_uring_submit");
  while (true) {
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{0, 100'000'000};
    ret = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
    if (ret == 0 && cqe != nullptr) {
      int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      return res;
    }
    if (ret != -ETIME && ret != -EINTR) return Status::FromErrno(ret, "ublk: io_uring_wait_cqe");
    if (interrupted_ && interrupted_()) return Status::Shutdown("ublk: interrupted");
  }
}

Status UblkControl::Check(const char* what, uint32_t dev_id, Result<int> r) {
  if (!r.ok()) return r.status();
  if (*r >= 0) return Status::OK();
  int e = -*r;
  if (e == EPERM || e == EACCES)
    return Status::Permission(std::string("ublk: ") + what +
                              ": permission denied: ublk devices need root (CAP_SYS_ADMIN)");
  return Status::FromErrno(e, "ublk: " + std::string(what) + " of device " +
                                  std::to_string(dev_id));
}

Result<uint64_t> UblkControl::GetFeatures() {
  uint64_t features = 0;
  auto r = Command(ublk::kCmdGetFeatures, 0, &features, sizeof features, 0);
  if (!r.ok()) return r.status();
  if (*r == -EINVAL || *r == -EOPNOTSUPP || *r == -ENOTTY)
    return Status::NotSupported(
        "ublk: the kernel's ublk_drv lacks GET_FEATURES (Linux 6.5 or later is needed)");
  UB_RETURN_IF_ERROR(Check("GET_FEATURES", 0, r));
  if (const char* hide = std::getenv("UBCACHE_UBLK_HIDE_FEATURES"))
    features &= ~std::strtoull(hide, nullptr, 16);
  return features;
}

Status UblkControl::AddDev(ublk::DevInfo* info) {
  auto r = Command(ublk::kCmdAddDev, info->dev_id, info, sizeof *info, 0);
  if (r.ok() && *r == -EEXIST)
    return Status::Busy("ublk: device id " + std::to_string(info->dev_id) +
                        " is taken (/dev/ublkc" + std::to_string(info->dev_id) +
                        " exists): pick another --ublk-id, or --recover it");
  return Check("ADD_DEV", info->dev_id, r);
}

Status UblkControl::SetParams(uint32_t dev_id, const ublk::Params& params) {
  ublk::Params p = params;
  return Check("SET_PARAMS", dev_id, Command(ublk::kCmdSetParams, dev_id, &p, sizeof p, 0));
}

Result<ublk::DevInfo> UblkControl::GetDevInfo(uint32_t dev_id) {
  ublk::DevInfo info{};
  auto r = Command(ublk::kCmdGetDevInfo, dev_id, &info, sizeof info, 0);
  if (r.ok() && *r == -ENODEV)
    return Status::NotFound("ublk: there is no ublk device " + std::to_string(dev_id));
  UB_RETURN_IF_ERROR(Check("GET_DEV_INFO", dev_id, r));
  return info;
}

Result<ublk::Params> UblkControl::GetParams(uint32_t dev_id) {
  ublk::Params p{};
  p.len = sizeof p;
  UB_RETURN_IF_ERROR(
      Check("GET_PARAMS", dev_id, Command(ublk::kCmdGetParams, dev_id, &p, sizeof p, 0)));
  return p;
}

Status UblkControl::StartDev(uint32_t dev_id) {
  return Check("START_DEV", dev_id,
               Command(ublk::kCmdStartDev, dev_id, nullptr, 0, static_cast<uint64_t>(getpid())));
}

Status UblkControl::StopDev(uint32_t dev_id) {
  return Check("STOP_DEV", dev_id, Command(ublk::kCmdStopDev, dev_id, nullptr, 0, 0));
}

Status UblkControl::DelDev(uint32_t dev_id) {
  return Check("DEL_DEV", dev_id, Command(ublk::kCmdDelDev, dev_id, nullptr, 0, 0));
}

Status UblkControl::StartUserRecovery(uint32_t dev_id) {
  auto r = Command(ublk::kCmdStartUserRecovery, dev_id, nullptr, 0, 0);
  if (r.ok() && *r == -EBUSY) return Status::Busy("ublk: device " + std::to_string(dev_id) +
                                                  " is not quiesced yet");
  return Check("START_USER_RECOVERY", dev_id, r);
}

Status UblkControl::UpdateSize(uint32_t dev_id, uint64_t bytes) {
  return Check("UPDATE_SIZE", dev_id, Command(ublk::kCmdUpdateSize, dev_id, nullptr, 0, bytes >> 9));
}

Status UblkControl::EndUserRecovery(uint32_t dev_id) {
  return Check("END_USER_RECOVERY", dev_id,
               Command(ublk::kCmdEndUserRecovery, dev_id, nullptr, 0,
                       static_cast<uint64_t>(getpid())));
}

}  // namespace ubcache
