// SPDX-License-Identifier: Apache-2.0
// ModelDevice: a slow device in front of a fast one ("sas:mem:1G",
// "hdd,rpm=7200:/data/backing.img"). Each request is really done on the
// device below, but completes no earlier than the spindle model says.
//
// One actuator: requests are served one at a time, in arrival order. The
// device keeps the virtual time at which the actuator becomes free; a new
// request starts at max(now, that time) and ends its service time later.
//
// Thread safety: any reactor thread; a mutex guards the model and the
// actuator clock for the few instructions that compute a service time.
#pragma once

#include <memory>

#include "backend/block_device.h"
#include "backend/spindle_model.h"
#include "util/thread_annotations.h"

namespace ubcache {

class ModelDevice final : public BlockDevice {
 public:
  ModelDevice(std::string spec, std::unique_ptr<BlockDevice> lower, SpindleParams params);
  std::string Describe() const override;
  bool rotational() const override { return true; }
  // The seek model keeps the geometry it was made with: distances past the
  // old end cost a full stroke, which is what a grown spindle's outer part
  // would cost anyway.
  Result<uint64_t> Grow() override {
    UB_ASSIGN_OR_RETURN(uint64_t lower, lower_->Grow());
    UB_RETURN_IF_ERROR(SetGrownSize(lower));
    return lower;
  }
  void SetResizeHandler(ResizeHandler on_resize) override { lower_->SetResizeHandler(std::move(on_resize)); }
  void SetFenceHandler(FenceHandler on_fence) override { lower_->SetFenceHandler(std::move(on_fence)); }
  const SpindleParams& params() const { return params_; }

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override;

 private:
  std::unique_ptr<BlockDevice> lower_;
  SpindleParams params_;
  Mutex mu_;
  SpindleModel model_ GUARDED_BY(mu_);
  uint64_t busy_until_ns_ GUARDED_BY(mu_) = 0;
};

}  // namespace ubcache
