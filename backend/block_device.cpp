// SPDX-License-Identifier: Apache-2.0
#include "backend/block_device.h"

#include <cassert>

namespace ubcache {

const char* IoOpName(IoOp op) {
  switch (op) {
    case IoOp::kRead: return "read";
    case IoOp::kWrite: return "write";
    case IoOp::kFlush: return "flush";
    case IoOp::kDiscard: return "discard";
    case IoOp::kWriteZeroes: return "write-zeroes";
  }
  return "?";
}

Status BlockDevice::Validate(const IoRequest& req) const {
  if (req.op == IoOp::kFlush) return Status::OK();
  auto where = [&] {
    return spec_ + ": " + IoOpName(req.op) + " at " + std::to_string(req.offset) + "+" +
           std::to_string(req.len);
  };
  if (req.len == 0) return Status::InvalidArgument(where() + ": zero length");
  if (req.offset > size_ || req.len > size_ - req.offset)
    return Status::NoSpace(where() + ": past the end (" + std::to_string(size_) + " bytes)");
  if (req.offset % block_size_ != 0 || req.len % block_size_ != 0)
    return Status::InvalidArgument(where() + ": not aligned to " + std::to_string(block_size_) +
                                   " bytes");
  if (req.op != IoOp::kRead && read_only_)
    return Status::Permission(where() + ": device is read-only");
  if ((req.op == IoOp::kRead || req.op == IoOp::kWrite) && req.buf == nullptr)
    return Status::InvalidArgument(where() + ": no buffer");
  return Status::OK();
}

void BlockDevice::Submit(const IoRequest& req, IoDone done) {
  assert(Reactor::Current() != nullptr && "BlockDevice::Submit needs a reactor on this thread");
  Status st = Validate(req);
  if (!st.ok()) {
    CompleteLater(std::move(done), std::move(st));
    return;
  }
  DoSubmit(req, std::move(done));
}

void BlockDevice::Prefetch(uint64_t offset, uint64_t len, IoDone done) {
  static uint8_t no_buffer;  // validation wants a buffer; a prefetch brings its own
  Status st = Validate({IoOp::kRead, 0, offset, len, &no_buffer});
  if (!st.ok()) {
    CompleteLater(std::move(done), std::move(st));
    return;
  }
  DoPrefetch(offset, len, std::move(done));
}

void BlockDevice::CompleteLater(IoDone done, Status st) {
  Reactor::Current()->DeferDone(std::move(done), std::move(st));
}

}  // namespace ubcache
