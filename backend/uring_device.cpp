// SPDX-License-Identifier: Apache-2.0
#include "backend/uring_device.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "util/aligned_buffer.h"
#include "util/log.h"
#include "util/size.h"

namespace ubcache {

namespace {

// Zeroes for write-zeroes and discard where fallocate is not supported.
constexpr uint64_t kZeroChunk = 1 << 20;
const uint8_t* ZeroChunk() {
  static AlignedBuffer* zeros = [] {
    auto* b = new AlignedBuffer(kZeroChunk);
    b->Zero();
    return b;
  }();
  return zeros->data();
}

}  // namespace

// One request in flight on one ring. Resubmits itself after -EAGAIN and
// after short transfers until the whole range is done.
struct UringOp final : IoCompletion {
  UringDevice* dev;
  IoRequest req;
  uint64_t done_bytes = 0;
  bool zero_fallback = false;  // fallocate refused: write zeroes by hand
  IoDone done;

  void Issue() {
    Reactor::Current()->DiskIoStarted(req.op == IoOp::kRead, req.len);
    io_uring_sqe* sqe = Reactor::Current()->PrepareSqe(this);
    uint64_t off = req.offset + done_bytes;
    uint64_t left = req.len - done_bytes;
    switch (req.op) {
      case IoOp::kRead:
        io_uring_prep_read(sqe, dev->fd_, static_cast<uint8_t*>(req.buf) + done_bytes,
                           static_cast<unsigned>(std::min<uint64_t>(left, 1u << 30)), off);
        break;
      case IoOp::kWrite:
        io_uring_prep_write(sqe, dev->fd_, static_cast<uint8_t*>(req.buf) + done_bytes,
                            static_cast<unsigned>(std::min<uint64_t>(left, 1u << 30)), off);
        if (req.flags & kIoFua) sqe->rw_flags = RWF_DSYNC;
        break;
      case IoOp::kFlush:
        io_uring_prep_fsync(sqe, dev->fd_, IORING_FSYNC_DATASYNC);
        break;
      case IoOp::kDiscard:
      case IoOp::kWriteZeroes:
        if (zero_fallback) {
          io_uring_prep_write(sqe, dev->fd_, ZeroChunk(),
                              static_cast<unsigned>(std::min(left, kZeroChunk)), off);
        } else {
          // Discard punches a hole (reads back zeros); write-zeroes keeps the
          // range allocated, as NBD's NO_HOLE and ublk expect.
          int mode = FALLOC_FL_KEEP_SIZE |
                     (req.op == IoOp::kDiscard ? FALLOC_FL_PUNCH_HOLE : FALLOC_FL_ZERO_RANGE);
          io_uring_prep_fallocate(sqe, dev->fd_, mode, off, left);
        }
        break;
    }
  }

  void Complete(int32_t res, uint32_t) override {
    Reactor::Current()->DiskIoDone(req.op == IoOp::kRead, req.len);
    if (res == -EAGAIN || res == -EINTR) {
      Issue();
      return;
    }
    if (res < 0) {
      if ((res == -EOPNOTSUPP || res == -EINVAL) && !zero_fallback &&
          (req.op == IoOp::kDiscard || req.op == IoOp::kWriteZeroes)) {
        zero_fallback = true;
        Issue();
        return;
      }
      Finish(Status::FromErrno(res, dev->spec() + ": " + IoOpName(req.op) + " at " +
                                        std::to_string(req.offset + done_bytes)));
      return;
    }
    switch (req.op) {
      case IoOp::kFlush:
        Finish(Status::OK());
        return;
      case IoOp::kDiscard:
      case IoOp::kWriteZeroes:
        if (!zero_fallback) {
          Finish(Status::OK());
          return;
        }
        [[fallthrough]];
      case IoOp::kRead:
      case IoOp::kWrite:
        if (res == 0) {
          Finish(Status::IoError(dev->spec() + ": " + IoOpName(req.op) + " at " +
                                 std::to_string(req.offset + done_bytes) + ": unexpected end"));
          return;
        }
        done_bytes += static_cast<uint64_t>(res);
        if (done_bytes < req.len) {
          Issue();  // short transfer: carry on from where it stopped
          return;
        }
        Finish(Status::OK());
        return;
    }
  }

  void Finish(Status st) {
    IoDone d = std::move(done);
    delete this;
    d(std::move(st));
  }
};

Result<std::unique_ptr<UringDevice>> UringDevice::Open(const std::string& spec,
                                                       const std::string& path,
                                                       const OpenOptions& opts) {
  int flags = (opts.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
  bool direct = true;
  int fd = open(path.c_str(), flags | O_DIRECT);
  if (fd < 0 && errno == EINVAL) {
    if (opts.require_direct)
      return Status::NotSupported(spec + ": O_DIRECT refused by the filesystem");
    direct = false;
    fd = open(path.c_str(), flags);
    if (fd >= 0) UB_WARN("{}: O_DIRECT refused; using buffered I/O (flush still syncs)", spec);
  }
  if (fd < 0) return Status::FromErrno(errno, spec);

  struct stat st;
  if (fstat(fd, &st) < 0) {
    int e = errno;
    close(fd);
    return Status::FromErrno(e, spec + ": fstat");
  }
  uint64_t size = 0;
  uint32_t block = 512;
  bool blkdev = S_ISBLK(st.st_mode);
  if (blkdev) {
    int lbs = 0;
    if (ioctl(fd, BLKGETSIZE64, &size) < 0 || ioctl(fd, BLKSSZGET, &lbs) < 0) {
      int e = errno;
      close(fd);
      return Status::FromErrno(e, spec + ": block device ioctl");
    }
    block = static_cast<uint32_t>(std::max(lbs, 512));
  } else if (S_ISREG(st.st_mode)) {
    size = static_cast<uint64_t>(st.st_size);
    struct statx sx;
    if (direct && statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
        (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align > 512) {
      block = sx.stx_dio_offset_align;
    }
  } else {
    close(fd);
    return Status::InvalidArgument(spec + ": not a regular file or block device");
  }
  if (size < block) {
    close(fd);
    return Status::InvalidArgument(spec + ": too small (" + std::to_string(size) + " bytes)");
  }
  size -= size % block;  // a partial last block cannot be addressed with O_DIRECT
  return std::unique_ptr<UringDevice>(
      new UringDevice(spec, size, block, opts.read_only, fd, direct, blkdev));
}

UringDevice::~UringDevice() {
  if (fd_ >= 0) close(fd_);
}

Result<uint64_t> UringDevice::Grow() {
  uint64_t size = 0;
  if (is_blkdev_) {
    if (ioctl(fd_, BLKGETSIZE64, &size) < 0) return Status::FromErrno(errno, spec_ + ": BLKGETSIZE64");
  } else {
    struct stat st;
    if (fstat(fd_, &st) < 0) return Status::FromErrno(errno, spec_ + ": fstat");
    size = static_cast<uint64_t>(st.st_size);
  }
  size -= size % block_size_;  // as Open: whole blocks only
  UB_RETURN_IF_ERROR(SetGrownSize(size));
  return size;
}

std::string UringDevice::Describe() const {
  return spec_ + " (" + (is_blkdev_ ? "block device" : "file") + ", " + FormatSize(size()) + ", " +
         (direct_ ? "O_DIRECT" : "buffered") + ")";
}

void UringDevice::DoSubmit(const IoRequest& req, IoDone done) {
  auto* op = new UringOp();
  op->dev = this;
  op->req = req;
  op->done = std::move(done);
  op->Issue();
}

}  // namespace ubcache
