// SPDX-License-Identifier: Apache-2.0
// FaultDevice: error and latency injection over any device ("fault:SPEC"),
// for the failure tests that DESIGN.md §5 asks for.
//
//  - EIO for requests that touch configured ranges, or with a probability;
//  - added latency on every request;
//  - drop_unflushed: writes are held in an overlay until FLUSH (or a FUA
//    write) makes them durable; PowerLoss() throws the overlay away, as a
//    power cut throws away a disk's volatile cache. Reads see the overlay.
//  - tear_unflushed: a power cut that reorders and tears. Each 4 KiB sector
//    of a write, discard or write-zeroes that is not FUA independently
//    (a coin per sector, from `seed`) either reaches the device below at
//    once or is held in the overlay as above. Half of one write may survive
//    a cut and half not. The overlay lives only in process memory, so
//    kill -9 of the process holding the device is a power cut of it: what
//    reached the device below stays, the rest is lost. Takes the place of
//    drop_unflushed when both are set. Needs a lower block size dividing
//    4 KiB (CheckFaultConfig).
//
// Ordering: a write that goes to the device below first drops older overlay
// copies of its blocks, so neither a read nor a later FLUSH can put the old
// bytes back. A torn sector that a flush is still writing out is always
// held: two writes of one block in flight at once may land in either order.
//
// The configuration can be changed at run time (SetConfig), by code: the
// unit tests use it; the control socket does not expose it, so a daemon's
// faults are fixed by its device spec. Thread safety: any thread may
// configure; any reactor
// thread may submit. One mutex guards config, overlay, random state and
// counters; it is held only to copy or patch bytes and to decide, never
// across I/O.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backend/block_device.h"
#include "util/thread_annotations.h"

namespace ubcache {

struct FaultConfig {
  struct Range {
    uint64_t offset = 0;
    uint64_t len = 0;
  };
  std::vector<Range> eio_ranges;  // requests overlapping any of these fail
  double eio_probability = 0;     // 0..1, per request
  bool eio_reads = true;          // which operations the EIO rules apply to
  bool eio_writes = true;
  uint64_t latency_us = 0;  // added to every request
  bool drop_unflushed = false;
  bool tear_unflushed = false;  // per 4 KiB sector: written through, or held like drop_unflushed
  uint64_t seed = 1;
};

// The sector that tear_unflushed keeps or loses whole, whatever the lower block size.
constexpr uint64_t kTearSector = 4096;

// Parses the option list of a "fault,...:" spec ("eio=0+4096,latency_us=500").
Result<FaultConfig> ParseFaultOptions(const std::vector<std::string>& options);
// Whether `config` suits a device below with `lower_block_size`: tear_unflushed
// needs whole blocks per sector.
Status CheckFaultConfig(const FaultConfig& config, uint32_t lower_block_size);

class FaultDevice final : public BlockDevice {
 public:
  // `config` must pass CheckFaultConfig for `lower`.
  FaultDevice(std::string spec, std::unique_ptr<BlockDevice> lower, FaultConfig config);
  std::string Describe() const override;
  bool rotational() const override { return lower_->rotational(); }
  Result<uint64_t> Grow() override {
    UB_ASSIGN_OR_RETURN(uint64_t lower, lower_->Grow());
    UB_RETURN_IF_ERROR(SetGrownSize(lower));
    return lower;
  }
  void SetResizeHandler(ResizeHandler on_resize) override { lower_->SetResizeHandler(std::move(on_resize)); }
  void SetFenceHandler(FenceHandler on_fence) override { lower_->SetFenceHandler(std::move(on_fence)); }

  void SetConfig(FaultConfig config) EXCLUDES(mu_);
  FaultConfig config() const EXCLUDES(mu_);
  // Forgets every write not yet made durable by FLUSH or FUA (or, with
  // tear_unflushed, by reaching the device below).
  void PowerLoss() EXCLUDES(mu_);
  uint64_t injected_errors() const EXCLUDES(mu_);
  // Bytes held in the overlay, waiting for a flush.
  uint64_t unflushed_bytes() const EXCLUDES(mu_);

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override;

 private:
  using Overlay = std::map<uint64_t, std::vector<uint8_t>>;  // block number -> block
  bool ShouldFail(const IoRequest& req) REQUIRES(mu_);
  void Deliver(IoDone done, Status st, uint64_t latency_us);
  void StoreInOverlay(const IoRequest& req) REQUIRES(mu_);
  void DropFromOverlay(const IoRequest& req) REQUIRES(mu_);
  // Holds some sectors of `req` and returns the runs to write through now.
  std::vector<IoRequest> TearLocked(const IoRequest& req) REQUIRES(mu_);
  void SubmitThrough(std::vector<IoRequest> parts, IoDone done, uint64_t latency_us);
  // The overlay's copies of a read's blocks, taken when the read is
  // submitted (a flush finishing while the read is below must not take
  // them away before the read sees them), applied when it completes.
  using Patch = std::vector<std::pair<uint64_t, std::vector<uint8_t>>>;  // byte offset in req
  Patch PatchLocked(const IoRequest& req) REQUIRES(mu_);
  bool OverlapsFlushingLocked(const IoRequest& req) REQUIRES(mu_);
  void DoFlush(IoDone done, uint64_t latency_us);
  void FlushDone() EXCLUDES(mu_);

  std::unique_ptr<BlockDevice> lower_;
  mutable Mutex mu_;
  FaultConfig config_ GUARDED_BY(mu_);
  uint64_t rng_ GUARDED_BY(mu_);       // eio_p draws
  uint64_t tear_rng_ GUARDED_BY(mu_);  // tear_unflushed draws, apart so eio_p leaves them alone
  uint64_t injected_ GUARDED_BY(mu_) = 0;
  Overlay overlay_ GUARDED_BY(mu_);
  Overlay flushing_ GUARDED_BY(mu_);  // taken from overlay_ by the flush in progress
  // One flush at a time: two writing the same block below could land out of
  // order. Flushes, and durable writes over blocks the flush is writing
  // out, wait for it and are resubmitted on their own reactors.
  struct Queued {
    Reactor* reactor;
    IoRequest req;
    IoDone done;
  };
  bool flush_active_ GUARDED_BY(mu_) = false;
  std::vector<Queued> after_flush_ GUARDED_BY(mu_);
};

}  // namespace ubcache
