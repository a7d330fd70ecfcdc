// SPDX-License-Identifier: Apache-2.0
#include "backend/block_device.h"

#include <cassert>

#include "util/size.h"

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
  const uint64_t size = this->size();  // once: Grow may change it meanwhile
  if (req.offset > size || req.len > size - req.offset)
    return Status::NoSpace(where() + ": past the end (" + std::to_string(size) + " bytes)");
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

Status BlockDevice::SetGrownSize(uint64_t new_size) {
  uint64_t old = size();
  if (new_size < old)
    return Status::InvalidArgument(spec_ + ": would shrink from " + FormatSize(old) + " to " + FormatSize(new_size) +
                                   " (" + std::to_string(old) + " to " + std::to_string(new_size) +
                                   " bytes); shrinking is not supported: data past the new end may be dirty "
                                   "in the cache");
  size_.store(new_size, std::memory_order_release);
  return Status::OK();
}

void BlockDevice::CompleteLater(IoDone done, Status st) {
  Reactor::Current()->DeferDone(std::move(done), std::move(st));
}

}  // namespace ubcache
