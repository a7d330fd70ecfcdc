// SPDX-License-Identifier: Apache-2.0
#include "backend/mem_device.h"

#include <cstdlib>
#include <cstring>

#include "util/size.h"

namespace ubcache {

Result<std::unique_ptr<MemDevice>> MemDevice::Create(const std::string& spec, uint64_t size,
                                                     uint32_t block_size) {
  if (size == 0 || size % block_size != 0)
    return Status::InvalidArgument(spec + ": size must be a non-zero multiple of " +
                                   std::to_string(block_size));
  if (size > (uint64_t{1} << 50)) return Status::InvalidArgument(spec + ": larger than 1 PiB");
  return std::unique_ptr<MemDevice>(new MemDevice(spec, size, block_size));
}

MemDevice::MemDevice(std::string spec, uint64_t size, uint32_t block_size)
    : BlockDevice(std::move(spec), size, block_size, false),
      chunks_(new std::atomic<uint8_t*>[(size + kChunk - 1) / kChunk]),
      nchunks_((size + kChunk - 1) / kChunk) {
  for (uint64_t i = 0; i < nchunks_; i++) chunks_[i].store(nullptr, std::memory_order_relaxed);
}

MemDevice::~MemDevice() {
  for (uint64_t i = 0; i < nchunks_; i++) std::free(chunks_[i].load(std::memory_order_relaxed));
}

std::string MemDevice::Describe() const { return spec_ + " (RAM, " + FormatSize(size()) + ")"; }

uint8_t* MemDevice::Chunk(uint64_t index, bool create) {
  uint8_t* c = chunks_[index].load(std::memory_order_acquire);
  if (c || !create) return c;
  auto* fresh = static_cast<uint8_t*>(std::aligned_alloc(4096, kChunk));
  if (!fresh) return nullptr;
  std::memset(fresh, 0, kChunk);
  if (chunks_[index].compare_exchange_strong(c, fresh, std::memory_order_acq_rel)) return fresh;
  std::free(fresh);  // another thread installed it first
  return c;
}

template <typename Fn>
void MemDevice::ForEachPiece(uint64_t offset, uint64_t len, Fn fn) {
  uint64_t done = 0;
  while (done < len) {
    uint64_t pos = offset + done;
    uint64_t in_chunk = pos % kChunk;
    uint64_t n = std::min(len - done, kChunk - in_chunk);
    fn(pos / kChunk, in_chunk, done, n);
    done += n;
  }
}

void MemDevice::DoSubmit(const IoRequest& req, IoDone done) {
  Status st;
  auto* buf = static_cast<uint8_t*>(req.buf);
  switch (req.op) {
    case IoOp::kRead:
      ForEachPiece(req.offset, req.len, [&](uint64_t idx, uint64_t off, uint64_t at, uint64_t n) {
        uint8_t* c = Chunk(idx, false);
        if (c)
          std::memcpy(buf + at, c + off, n);
        else
          std::memset(buf + at, 0, n);
      });
      break;
    case IoOp::kWrite:
      ForEachPiece(req.offset, req.len, [&](uint64_t idx, uint64_t off, uint64_t at, uint64_t n) {
        uint8_t* c = Chunk(idx, true);
        if (c)
          std::memcpy(c + off, buf + at, n);
        else if (st.ok())
          st = Status::NoSpace(spec_ + ": out of memory");
      });
      break;
    case IoOp::kFlush:
      break;
    case IoOp::kDiscard:
    case IoOp::kWriteZeroes:
      ForEachPiece(req.offset, req.len, [&](uint64_t idx, uint64_t off, uint64_t, uint64_t n) {
        if (uint8_t* c = Chunk(idx, false)) std::memset(c + off, 0, n);
      });
      break;
  }
  CompleteLater(std::move(done), std::move(st));
}

}  // namespace ubcache
