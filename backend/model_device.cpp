// SPDX-License-Identifier: Apache-2.0
#include "backend/model_device.h"

#include <algorithm>
#include <cstdio>

#include "util/clock.h"

namespace ubcache {

ModelDevice::ModelDevice(std::string spec, std::unique_ptr<BlockDevice> lower,
                         SpindleParams params)
    : BlockDevice(std::move(spec), lower->size(), lower->logical_block_size(), lower->read_only()),
      lower_(std::move(lower)),
      params_(params),
      model_(params, size_) {}

std::string ModelDevice::Describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, " (spindle model: %.0f rpm, %.1f ms avg seek, %.0f MB/s over ",
                params_.rpm, params_.avg_seek_ms, params_.mbps);
  return spec_ + buf + lower_->Describe() + ")";
}

void ModelDevice::DoSubmit(const IoRequest& req, IoDone done) {
  uint64_t finish_at;
  {
    MutexLock l(&mu_);
    uint64_t now = NowNanos();
    uint64_t start = std::max(now, busy_until_ns_);
    uint64_t service = 0;
    // Flush and discard carry no data over the head; they still wait their turn.
    if (req.op == IoOp::kRead || req.op == IoOp::kWrite) service = model_.Service(req.offset, req.len);
    busy_until_ns_ = start + service;
    finish_at = busy_until_ns_;
  }
  lower_->Submit(req, [finish_at, done = std::move(done)](Status st) mutable {
    if (NowNanos() >= finish_at) {
      done(std::move(st));
      return;
    }
    Reactor::Current()->RunAt(finish_at, [done = std::move(done), st = std::move(st)]() mutable {
      done(std::move(st));
    });
  });
}

}  // namespace ubcache
