// SPDX-License-Identifier: Apache-2.0
// MemDevice: RAM as a block device ("mem:1G"). Memory is a sparse array of
// 64 KiB chunks, allocated on first write: a large device costs only what
// is written, and reading a never-written chunk is a memset, not a page
// fault. Discard and write-zeroes clear bytes; chunks stay allocated.
//
// Completions are deferred to the submitter's reactor like every device's.
// Thread safety: any reactor thread. Chunks are installed with a
// compare-and-swap; concurrent writes to the same bytes are as undefined as
// they are on a disk.
#pragma once

#include <atomic>
#include <memory>

#include "backend/block_device.h"

namespace ubcache {

class MemDevice final : public BlockDevice {
 public:
  static Result<std::unique_ptr<MemDevice>> Create(const std::string& spec, uint64_t size,
                                                   uint32_t block_size = 512);
  ~MemDevice() override;
  std::string Describe() const override;

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override;

 private:
  static constexpr uint64_t kChunk = 64 << 10;
  MemDevice(std::string spec, uint64_t size, uint32_t block_size);
  // The chunk holding `index`, allocated (zeroed) if `create`, else maybe null.
  uint8_t* Chunk(uint64_t index, bool create);
  // Calls fn(chunk, offset in chunk, offset in request, length) per chunk piece.
  template <typename Fn>
  void ForEachPiece(uint64_t offset, uint64_t len, Fn fn);

  std::unique_ptr<std::atomic<uint8_t*>[]> chunks_;
  uint64_t nchunks_;
};

}  // namespace ubcache
