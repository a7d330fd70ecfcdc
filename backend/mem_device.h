// MemDevice: RAM as a block device ("mem:1G"). Pages are mapped lazily, so a
// large device costs only what is written; discard gives the pages back.
//
// Completions are deferred to the submitter's reactor like every device's.
// Thread safety: any reactor thread; concurrent writes to the same bytes are
// as undefined as they are on a disk, and nothing here locks.
#pragma once

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
  MemDevice(std::string spec, uint64_t size, uint32_t block_size, uint8_t* base)
      : BlockDevice(std::move(spec), size, block_size, false), base_(base) {}
  void ZeroRange(uint64_t offset, uint64_t len);
  uint8_t* base_;
};

}  // namespace ubcache
