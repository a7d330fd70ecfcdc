// SPDX-License-Identifier: Apache-2.0
// OffsetDevice: a window of another device, starting `offset` bytes in —
// how a formatted backing device is served from its data_offset, past the
// bcache superblock. Not owning; thread-safe as the device below is.
#pragma once

#include "backend/block_device.h"

namespace ubcache {

class OffsetDevice final : public BlockDevice {
 public:
  OffsetDevice(BlockDevice* lower, uint64_t offset)
      : BlockDevice(lower->spec(), lower->size() > offset ? lower->size() - offset : 0,
                    lower->logical_block_size(), lower->read_only()),
        lower_(lower),
        offset_(offset) {}
  bool rotational() const override { return lower_->rotational(); }
  Result<uint64_t> Grow() override {
    UB_ASSIGN_OR_RETURN(uint64_t lower, lower_->Grow());
    UB_RETURN_IF_ERROR(SetGrownSize(lower > offset_ ? lower - offset_ : 0));
    return size();
  }
  std::string Describe() const override {
    return lower_->Describe() + " from byte " + std::to_string(offset_);
  }

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override {
    IoRequest r = req;
    if (r.op != IoOp::kFlush) r.offset += offset_;
    lower_->Submit(r, std::move(done));
  }

 private:
  BlockDevice* lower_;
  uint64_t offset_;
};

}  // namespace ubcache
