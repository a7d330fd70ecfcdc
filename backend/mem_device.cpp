#include "backend/mem_device.h"

#include <sys/mman.h>

#include <cstring>

#include "util/size.h"

namespace ubcache {

Result<std::unique_ptr<MemDevice>> MemDevice::Create(const std::string& spec, uint64_t size,
                                                     uint32_t block_size) {
  if (size == 0 || size % block_size != 0)
    return Status::InvalidArgument(spec + ": size must be a non-zero multiple of " +
                                   std::to_string(block_size));
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, spec + ": mmap");
  return std::unique_ptr<MemDevice>(
      new MemDevice(spec, size, block_size, static_cast<uint8_t*>(p)));
}

MemDevice::~MemDevice() { munmap(base_, size_); }

std::string MemDevice::Describe() const { return spec_ + " (RAM, " + FormatSize(size_) + ")"; }

void MemDevice::ZeroRange(uint64_t offset, uint64_t len) {
  // Whole pages go back to the kernel (and read back as zeros); edges are cleared.
  constexpr uint64_t kPage = 4096;
  uint64_t first = (offset + kPage - 1) / kPage * kPage;
  uint64_t last = (offset + len) / kPage * kPage;
  if (first < last) {
    std::memset(base_ + offset, 0, first - offset);
    madvise(base_ + first, last - first, MADV_DONTNEED);
    std::memset(base_ + last, 0, offset + len - last);
  } else {
    std::memset(base_ + offset, 0, len);
  }
}

void MemDevice::DoSubmit(const IoRequest& req, IoDone done) {
  switch (req.op) {
    case IoOp::kRead:
      std::memcpy(req.buf, base_ + req.offset, req.len);
      break;
    case IoOp::kWrite:
      std::memcpy(base_ + req.offset, req.buf, req.len);
      break;
    case IoOp::kFlush:
      break;
    case IoOp::kDiscard:
    case IoOp::kWriteZeroes:
      ZeroRange(req.offset, req.len);
      break;
  }
  CompleteLater(std::move(done), Status::OK());
}

}  // namespace ubcache
