// SPDX-License-Identifier: Apache-2.0
// The ublk driver's user-space ABI, as far as ubcache uses it.
//
// Mirrors include/uapi/linux/ublk_cmd.h of Linux 6.12. Debian 12's
// linux-libc-dev ships the 6.1 header, which lacks GET_FEATURES, the
// ioctl-encoded command numbers, USER_COPY and the recovery feature bits, so
// the constants live here under our own names (namespace ublk) instead of
// depending on whichever header the build machine has.
#pragma once

#include <sys/ioctl.h>

#include <cerrno>
#include <cstdint>

namespace ubcache::ublk {

// Commands on /dev/ublk-control (IORING_OP_URING_CMD, SQE128; the payload is
// a CtrlCmd in sqe->cmd). Encoded with _IOR/_IOWR as UBLK_F_CMD_IOCTL_ENCODE
// kernels expect.
struct CtrlCmd {
  uint32_t dev_id;
  uint16_t queue_id;  // 0xffff: not a queue command
  uint16_t len;       // of the buffer at addr
  uint64_t addr;
  uint64_t data[1];
  uint16_t dev_path_len;
  uint16_t pad;
  uint32_t reserved;
};
static_assert(sizeof(CtrlCmd) == 32);

constexpr uint32_t kCmdGetDevInfo = _IOR('u', 0x02, CtrlCmd);
constexpr uint32_t kCmdAddDev = _IOWR('u', 0x04, CtrlCmd);
constexpr uint32_t kCmdDelDev = _IOWR('u', 0x05, CtrlCmd);
constexpr uint32_t kCmdStartDev = _IOWR('u', 0x06, CtrlCmd);
constexpr uint32_t kCmdStopDev = _IOWR('u', 0x07, CtrlCmd);
constexpr uint32_t kCmdSetParams = _IOWR('u', 0x08, CtrlCmd);
constexpr uint32_t kCmdGetParams = _IOR('u', 0x09, CtrlCmd);
constexpr uint32_t kCmdStartUserRecovery = _IOWR('u', 0x10, CtrlCmd);
constexpr uint32_t kCmdEndUserRecovery = _IOWR('u', 0x11, CtrlCmd);
constexpr uint32_t kCmdGetFeatures = _IOR('u', 0x13, CtrlCmd);
// Linux 6.16 (not in 6.12's header): data[0] is the new size in 512-byte
// sectors; offered when GET_FEATURES has kFUpdateSize.
constexpr uint32_t kCmdUpdateSize = _IOWR('u', 0x15, CtrlCmd);

// Feature bits (GET_FEATURES, and ADD_DEV's DevInfo::flags).
constexpr uint64_t kFZeroCopy = 1ull << 0;
constexpr uint64_t kFUserRecovery = 1ull << 3;
constexpr uint64_t kFUserRecoveryReissue = 1ull << 4;
constexpr uint64_t kFUnprivilegedDev = 1ull << 5;
constexpr uint64_t kFCmdIoctlEncode = 1ull << 6;
constexpr uint64_t kFUserCopy = 1ull << 7;
constexpr uint64_t kFUpdateSize = 1ull << 10;  // Linux 6.16: kCmdUpdateSize

// Device states (DevInfo::state).
constexpr uint16_t kStateDead = 0;
constexpr uint16_t kStateLive = 1;
constexpr uint16_t kStateQuiesced = 2;

struct DevInfo {
  uint16_t nr_hw_queues;
  uint16_t queue_depth;
  uint16_t state;
  uint16_t pad0;
  uint32_t max_io_buf_bytes;
  uint32_t dev_id;
  int32_t ublksrv_pid;
  uint32_t pad1;
  uint64_t flags;
  uint64_t ublksrv_flags;
  uint32_t owner_uid;
  uint32_t owner_gid;
  uint64_t reserved1;
  uint64_t reserved2;
};
static_assert(sizeof(DevInfo) == 64);

// SET_PARAMS payload. The kernel takes min(len, its own size), so later
// parameter types it knows and we don't stay zero.
struct ParamBasic {
  uint32_t attrs;
  uint8_t logical_bs_shift;
  uint8_t physical_bs_shift;
  uint8_t io_opt_shift;
  uint8_t io_min_shift;
  uint32_t max_sectors;
  uint32_t chunk_sectors;
  uint64_t dev_sectors;
  uint64_t virt_boundary_mask;
};
constexpr uint32_t kAttrReadOnly = 1u << 0;
constexpr uint32_t kAttrVolatileCache = 1u << 2;
constexpr uint32_t kAttrFua = 1u << 3;

struct ParamDiscard {
  uint32_t discard_alignment;
  uint32_t discard_granularity;
  uint32_t max_discard_sectors;
  uint32_t max_write_zeroes_sectors;
  uint16_t max_discard_segments;
  uint16_t reserved0;
};

constexpr uint32_t kParamBasic = 1u << 0;
constexpr uint32_t kParamDiscard = 1u << 1;

struct Params {
  uint32_t len;
  uint32_t types;
  ParamBasic basic;
  ParamDiscard discard;
  uint8_t devt[16];   // struct ublk_param_devt (read-only, unused)
  uint8_t zoned[32];  // struct ublk_param_zoned (unused)
};
static_assert(sizeof(Params) == 112);  // as the kernel lays it out (8-byte aligned)

// Commands on /dev/ublkcN, one per tag (a plain 64-byte SQE carries an IoCmd
// in its 16-byte cmd area).
struct IoCmd {
  uint16_t q_id;
  uint16_t tag;
  int32_t result;  // COMMIT: bytes done or -errno
  uint64_t addr;   // the tag's buffer; 0 with USER_COPY
};
static_assert(sizeof(IoCmd) == 16);

constexpr uint32_t kIoFetchReq = _IOWR('u', 0x20, IoCmd);
constexpr uint32_t kIoCommitAndFetchReq = _IOWR('u', 0x21, IoCmd);

// Fetch results: OK carries a request; ABORT means the tag is done (device
// stopping); anything else negative is an error.
constexpr int32_t kIoResOk = 0;
constexpr int32_t kIoResAbort = -ENODEV;

// The request descriptors of queue q are mmap'd read-only from /dev/ublkcN
// at q * kMaxCmdBufSize, one IoDesc per tag.
struct IoDesc {
  uint32_t op_flags;  // op in bits 0-7, flags above
  uint32_t nr_sectors;
  uint64_t start_sector;
  uint64_t addr;
};
static_assert(sizeof(IoDesc) == 24);

constexpr unsigned kMaxQueueDepth = 4096;
constexpr uint64_t kCmdBufOffset = 0;
constexpr uint64_t kMaxCmdBufSize = (kMaxQueueDepth * sizeof(IoDesc) + 4095) / 4096 * 4096;

constexpr uint8_t kOpRead = 0;
constexpr uint8_t kOpWrite = 1;
constexpr uint8_t kOpFlush = 2;
constexpr uint8_t kOpDiscard = 3;
constexpr uint8_t kOpWriteZeroes = 5;
constexpr uint32_t kIoFFua = 1u << 13;
constexpr uint32_t kIoFNoUnmap = 1u << 15;

// USER_COPY: pread/pwrite on /dev/ublkcN at this offset reach the data of
// request (q, tag), plus the byte offset into it.
constexpr uint64_t kIoBufOffset = 0x80000000ull;
constexpr unsigned kTagOff = 25;
constexpr unsigned kQidOff = 25 + 16;
inline uint64_t UserCopyOffset(uint16_t q, uint16_t tag) {
  return kIoBufOffset + (uint64_t{q} << kQidOff) + (uint64_t{tag} << kTagOff);
}

}  // namespace ubcache::ublk
