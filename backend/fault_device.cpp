// SPDX-License-Identifier: Apache-2.0
#include "backend/fault_device.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "util/aligned_buffer.h"
#include "util/clock.h"
#include "util/power_domain.h"
#include "util/size.h"

namespace ubcache {

namespace {

// One step of a 64-bit LCG (Knuth's MMIX constants).
uint64_t NextRandom(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return *state;
}

// Starts the tear draws elsewhere in the sequence than the eio_p draws.
constexpr uint64_t kTearStream = 0x9e3779b97f4a7c15ull;

}  // namespace

Result<FaultConfig> ParseFaultOptions(const std::vector<std::string>& options) {
  FaultConfig c;
  for (const std::string& opt : options) {
    auto eq = opt.find('=');
    if (eq == std::string::npos) return Status::InvalidArgument("fault option '" + opt + "' needs =VALUE");
    std::string key = opt.substr(0, eq), val = opt.substr(eq + 1);
    if (key == "eio") {
      auto plus = val.find('+');
      if (plus == std::string::npos)
        return Status::InvalidArgument("fault option eio=" + val + ": expected OFFSET+LENGTH");
      UB_ASSIGN_OR_RETURN(uint64_t off, ParseSize(val.substr(0, plus)));
      UB_ASSIGN_OR_RETURN(uint64_t len, ParseSize(val.substr(plus + 1)));
      c.eio_ranges.push_back({off, len});
    } else if (key == "eio_p") {
      char* end = nullptr;
      double p = std::strtod(val.c_str(), &end);
      if (val.empty() || *end != '\0' || p < 0 || p > 1)
        return Status::InvalidArgument("fault option eio_p=" + val + ": expected 0..1");
      c.eio_probability = p;
    } else if (key == "ops") {
      if (val != "r" && val != "w" && val != "rw")
        return Status::InvalidArgument("fault option ops=" + val + ": expected r, w or rw");
      c.eio_reads = val.find('r') != std::string::npos;
      c.eio_writes = val.find('w') != std::string::npos;
    } else if (key == "latency_us") {
      UB_ASSIGN_OR_RETURN(c.latency_us, ParseUint(val, 0, 60'000'000, "fault option latency_us"));
    } else if (key == "drop_unflushed") {
      UB_ASSIGN_OR_RETURN(uint64_t v, ParseUint(val, 0, 1, "fault option drop_unflushed"));
      c.drop_unflushed = v == 1;
    } else if (key == "tear_unflushed") {
      UB_ASSIGN_OR_RETURN(uint64_t v, ParseUint(val, 0, 1, "fault option tear_unflushed"));
      c.tear_unflushed = v == 1;
    } else if (key == "seed") {
      UB_ASSIGN_OR_RETURN(c.seed, ParseUint(val, 0, UINT64_MAX, "fault option seed"));
    } else {
      return Status::InvalidArgument(
          "unknown fault option '" + key +
          "' (eio, eio_p, ops, latency_us, drop_unflushed, tear_unflushed, seed)");
    }
  }
  return c;
}

Status CheckFaultConfig(const FaultConfig& config, uint32_t lower_block_size) {
  if (config.tear_unflushed && kTearSector % lower_block_size != 0)
    return Status::InvalidArgument("fault option tear_unflushed: tears in " +
                                   std::to_string(kTearSector) +
                                   "-byte sectors, but the device below has " +
                                   std::to_string(lower_block_size) + "-byte blocks");
  return Status::OK();
}

FaultDevice::FaultDevice(std::string spec, std::unique_ptr<BlockDevice> lower, FaultConfig config)
    : BlockDevice(std::move(spec), lower->size(), lower->logical_block_size(), lower->read_only()),
      lower_(std::move(lower)),
      config_(std::move(config)) {
  MutexLock l(&mu_);
  assert(CheckFaultConfig(config_, block_size_).ok());
  rng_ = config_.seed;
  tear_rng_ = config_.seed ^ kTearStream;
  if (config_.drop_unflushed || config_.tear_unflushed) PowerHeldByProcess();
}

std::string FaultDevice::Describe() const {
  return spec_ + " (fault injection over " + lower_->Describe() + ")";
}

void FaultDevice::SetConfig(FaultConfig config) {
  MutexLock l(&mu_);
  config_ = std::move(config);
  assert(CheckFaultConfig(config_, block_size_).ok());
  rng_ = config_.seed;
  tear_rng_ = config_.seed ^ kTearStream;
  if (config_.drop_unflushed || config_.tear_unflushed) PowerHeldByProcess();
}

FaultConfig FaultDevice::config() const {
  MutexLock l(&mu_);
  return config_;
}

void FaultDevice::PowerLoss() {
  MutexLock l(&mu_);
  overlay_.clear();
  NewPowerDomain();  // what the devices' caches held is gone (util/power_domain.h)
}

uint64_t FaultDevice::injected_errors() const {
  MutexLock l(&mu_);
  return injected_;
}

uint64_t FaultDevice::unflushed_bytes() const {
  MutexLock l(&mu_);
  return (overlay_.size() + flushing_.size()) * block_size_;
}

bool FaultDevice::ShouldFail(const IoRequest& req) {
  bool applies = (req.op == IoOp::kRead && config_.eio_reads) ||
                 (req.op != IoOp::kRead && req.op != IoOp::kFlush && config_.eio_writes);
  if (!applies) return false;
  for (const auto& r : config_.eio_ranges) {
    if (req.offset < r.offset + r.len && r.offset < req.offset + req.len) return true;
  }
  if (config_.eio_probability > 0) {
    double u = static_cast<double>(NextRandom(&rng_) >> 11) / static_cast<double>(1ull << 53);
    if (u < config_.eio_probability) return true;
  }
  return false;
}

void FaultDevice::Deliver(IoDone done, Status st, uint64_t latency_us) {
  if (latency_us == 0) {
    done(std::move(st));
    return;
  }
  Reactor::Current()->RunAt(NowNanos() + latency_us * 1000,
                            [done = std::move(done), st = std::move(st)]() mutable {
                              done(std::move(st));
                            });
}

void FaultDevice::StoreInOverlay(const IoRequest& req) {
  const uint64_t bs = block_size_;
  for (uint64_t off = 0; off < req.len; off += bs) {
    auto& block = overlay_[(req.offset + off) / bs];
    if (req.op == IoOp::kWrite)
      block.assign(static_cast<const uint8_t*>(req.buf) + off,
                   static_cast<const uint8_t*>(req.buf) + off + bs);
    else
      block.assign(bs, 0);
  }
}

void FaultDevice::DropFromOverlay(const IoRequest& req) {
  const uint64_t bs = block_size_;
  for (uint64_t off = 0; off < req.len; off += bs) {
    overlay_.erase((req.offset + off) / bs);
    flushing_.erase((req.offset + off) / bs);
  }
}

std::vector<IoRequest> FaultDevice::TearLocked(const IoRequest& req) {
  const uint64_t bs = block_size_;
  const uint64_t end = req.offset + req.len;
  std::vector<IoRequest> through;
  for (uint64_t pos = req.offset; pos < end;) {
    const uint64_t next = std::min(end, (pos / kTearSector + 1) * kTearSector);
    IoRequest part = req;
    part.offset = pos;
    part.len = next - pos;
    if (req.buf) part.buf = static_cast<uint8_t*>(req.buf) + (pos - req.offset);
    bool held = NextRandom(&tear_rng_) >> 63;
    // Written through now, this sector could land before the older copy
    // that a flush is writing out, and lose to it.
    for (uint64_t b = pos / bs; !held && b < next / bs; b++) held = flushing_.count(b) > 0;
    if (held) {
      StoreInOverlay(part);
    } else {
      DropFromOverlay(part);  // older overlay copies must not reach the device after it
      if (!through.empty() && through.back().offset + through.back().len == pos)
        through.back().len += part.len;
      else
        through.push_back(part);
    }
    pos = next;
  }
  return through;
}

FaultDevice::Patch FaultDevice::PatchLocked(const IoRequest& req) {
  const uint64_t bs = block_size_;
  Patch patch;
  if (overlay_.empty() && flushing_.empty()) return patch;
  for (uint64_t off = 0; off < req.len; off += bs) {
    uint64_t blk = (req.offset + off) / bs;
    auto it = overlay_.find(blk);
    if (it != overlay_.end()) {
      patch.emplace_back(off, it->second);
    } else if (auto f = flushing_.find(blk); f != flushing_.end()) {
      patch.emplace_back(off, f->second);
    }
  }
  return patch;
}

bool FaultDevice::OverlapsFlushingLocked(const IoRequest& req) {
  if (flushing_.empty()) return false;
  const uint64_t bs = block_size_;
  for (uint64_t off = 0; off < req.len; off += bs)
    if (flushing_.count((req.offset + off) / bs)) return true;
  return false;
}

void FaultDevice::DoSubmit(const IoRequest& req, IoDone done) {
  uint64_t latency;
  bool hold = false;
  std::vector<IoRequest> through;  // tear_unflushed: the parts that reach the device below now
  Patch patch;
  {
    MutexLock l(&mu_);
    latency = config_.latency_us;
    if (req.op == IoOp::kFlush && flush_active_) {
      after_flush_.push_back({Reactor::Current(), req, std::move(done)});
      return;
    }
    if (ShouldFail(req)) {
      injected_++;
      Status st = Status::IoError(spec_ + ": injected " + IoOpName(req.op) + " error at " +
                                  std::to_string(req.offset));
      Reactor::Current()->Defer([this, done = std::move(done), st = std::move(st),
                                 latency]() mutable { Deliver(std::move(done), std::move(st), latency); });
      return;
    }
    bool write_like = req.op == IoOp::kWrite || req.op == IoOp::kDiscard ||
                      req.op == IoOp::kWriteZeroes;
    bool volatile_write = write_like && !(req.flags & kIoFua);
    if (volatile_write && config_.tear_unflushed) {
      through = TearLocked(req);
      hold = through.empty();
    } else if (volatile_write && config_.drop_unflushed) {
      StoreInOverlay(req);
      hold = true;
    } else if (write_like && OverlapsFlushingLocked(req)) {
      // Written below now, it could land before the older copy the flush is
      // writing out there, and lose to it: after the flush.
      after_flush_.push_back({Reactor::Current(), req, std::move(done)});
      return;
    } else if (write_like) {
      // Durable now (FUA) or not held: newer than anything in the overlay,
      // including blocks a flush in progress is still writing out, which
      // reads would otherwise patch over this write.
      DropFromOverlay(req);
    }
    if (req.op == IoOp::kRead) patch = PatchLocked(req);
  }
  if (hold) {
    Reactor::Current()->Defer([this, done = std::move(done), latency]() mutable {
      Deliver(std::move(done), Status::OK(), latency);
    });
    return;
  }
  if (req.op == IoOp::kFlush) {
    DoFlush(std::move(done), latency);
    return;
  }
  if (!through.empty()) {
    SubmitThrough(std::move(through), std::move(done), latency);
    return;
  }
  lower_->Submit(req, [this, req, patch = std::move(patch), done = std::move(done), latency](Status st) mutable {
    if (st.ok())
      for (const auto& [off, data] : patch) std::memcpy(static_cast<uint8_t*>(req.buf) + off, data.data(), data.size());
    Deliver(std::move(done), std::move(st), latency);
  });
}

// Submits `parts` below; `done` gets the first error once all have completed
// (each completion runs on this reactor thread, so the count needs no lock).
void FaultDevice::SubmitThrough(std::vector<IoRequest> parts, IoDone done, uint64_t latency) {
  struct Pending {
    IoDone done;
    size_t left;
    Status first_error;
  };
  auto p = std::make_shared<Pending>(Pending{std::move(done), parts.size(), Status::OK()});
  for (const IoRequest& part : parts) {
    lower_->Submit(part, [this, p, latency](Status st) {
      if (!st.ok() && p->first_error.ok()) p->first_error = std::move(st);
      if (--p->left == 0) Deliver(std::move(p->done), std::move(p->first_error), latency);
    });
  }
}

// Writes the overlay's blocks to the device below, then flushes it.
void FaultDevice::DoFlush(IoDone done, uint64_t latency) {
  struct FlushState {
    FaultDevice* dev;
    IoDone done;
    uint64_t latency;
    std::vector<AlignedBuffer> bufs;
    size_t pending = 1;
    Status first_error;
    void Put(Status st) {
      if (!st.ok() && first_error.ok()) first_error = std::move(st);
      if (--pending > 0) return;
      dev->lower_->Flush([this](Status st2) {
        if (!st2.ok() && first_error.ok()) first_error = std::move(st2);
        FaultDevice* d = dev;
        IoDone cb = std::move(done);
        Status result = std::move(first_error);
        uint64_t lat = latency;
        delete this;
        d->FlushDone();
        d->Deliver(std::move(cb), std::move(result), lat);
      });
    }
  };
  auto* fs = new FlushState{this, std::move(done), latency, {}, 1, Status::OK()};
  Overlay blocks;
  {
    MutexLock l(&mu_);
    flush_active_ = true;
    for (auto& [blk, data] : overlay_) flushing_[blk] = data;
    blocks.swap(overlay_);
  }
  const uint64_t bs = block_size_;
  for (auto& [blk, data] : blocks) {
    AlignedBuffer buf(bs);
    std::memcpy(buf.data(), data.data(), bs);
    fs->pending++;
    lower_->Write(blk * bs, bs, buf.data(), 0, [fs](Status st) { fs->Put(std::move(st)); });
    fs->bufs.push_back(std::move(buf));
  }
  fs->Put(Status::OK());
}

void FaultDevice::FlushDone() {
  std::vector<Queued> queued;
  {
    MutexLock l(&mu_);
    flushing_.clear();  // all written below and flushed: the device has them
    flush_active_ = false;
    queued.swap(after_flush_);
  }
  // Each on its own reactor, in order; a queued flush starts the next round
  // and whatever follows it queues again behind that.
  for (Queued& q : queued)
    q.reactor->Post([this, req = q.req, done = std::move(q.done)]() mutable { Submit(req, std::move(done)); });
}

}  // namespace ubcache
