// SPDX-License-Identifier: Apache-2.0
// UringDevice: a file or block device through the calling thread's io_uring,
// opened with O_DIRECT so the page cache neither hides nor doubles our I/O.
//
// Where O_DIRECT is refused (tmpfs, some FUSE filesystems) the device falls
// back to buffered I/O and says so in the log, unless require_direct is set.
// Short transfers and -EAGAIN are handled in one place, UringOp::Complete().
//
// Thread safety: any reactor thread may submit; the device holds only the fd.
#pragma once

#include <string>

#include "backend/block_device.h"

namespace ubcache {

class UringDevice final : public BlockDevice {
 public:
  static Result<std::unique_ptr<UringDevice>> Open(const std::string& spec, const std::string& path,
                                                   const OpenOptions& opts);
  ~UringDevice() override;

  std::string Describe() const override;
  // Re-reads the file's length or the block device's size (an extended LV).
  Result<uint64_t> Grow() override;
  bool direct() const { return direct_; }
  bool is_block_device() const { return is_blkdev_; }
  int fd() const { return fd_; }

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override;

 private:
  friend struct UringOp;
  UringDevice(std::string spec, uint64_t size, uint32_t block_size, bool read_only, int fd,
              bool direct, bool is_blkdev)
      : BlockDevice(std::move(spec), size, block_size, read_only),
        fd_(fd),
        direct_(direct),
        is_blkdev_(is_blkdev) {}

  int fd_;
  bool direct_;
  bool is_blkdev_;
};

}  // namespace ubcache
