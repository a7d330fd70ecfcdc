// SPDX-License-Identifier: Apache-2.0
// BlockDevice: the one asynchronous block I/O interface that files, block
// devices, RAM, remote NBD exports, modelled spindles and fault injectors
// (and, one layer up, the cache itself) all implement.
//
// Submit() validates the request — range, alignment to the logical block
// size, operation supported, device writable — and then hands it to the
// implementation. The completion callback always runs later on the calling
// thread's Reactor (Reactor::Current() must be set), never inside Submit(), so
// callers may submit while holding their own per-request state.
//
// Thread safety: a device may be shared by many reactor threads; each
// implementation documents what it locks. The size may grow while requests
// run (Grow, from a control thread): it is one atomic word, and a request is
// checked against the size it read once. Buffers belong to the caller until
// the completion runs; reads and writes need buffers aligned to
// logical_block_size() (AlignedBuffer gives 4 KiB).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "backend/reactor.h"
#include "util/callback.h"
#include "util/status.h"

namespace ubcache {

enum class IoOp : uint8_t {
  kRead,
  kWrite,
  kFlush,        // make every completed write durable
  kDiscard,      // the range may read back as zeros or old data; ours give zeros
  kWriteZeroes,  // the range reads back as zeros
};

const char* IoOpName(IoOp op);

enum IoFlags : uint32_t {
  kIoFua = 1u << 0,      // write: durable before completion
  kIoNoUnmap = 1u << 1,  // write-zeroes: keep the range allocated
  // write: arrived while a FLUSH of the device was in flight, or first after
  // one — a sync hint the cache sets itself (BypassPolicy::MarkSyncHint);
  // devices ignore it.
  kIoAfterFlush = 1u << 2,
};

struct IoRequest {
  IoOp op = IoOp::kRead;
  uint32_t flags = 0;
  uint64_t offset = 0;
  uint64_t len = 0;
  void* buf = nullptr;  // reads and writes only
};

using IoDone = Callback<void(Status)>;

class BlockDevice {
 public:
  virtual ~BlockDevice() = default;

  uint64_t size() const { return size_.load(std::memory_order_acquire); }
  uint32_t logical_block_size() const { return block_size_; }
  bool read_only() const { return read_only_; }
  // The spec it was opened from ("sas:/data/backing.img").
  const std::string& spec() const { return spec_; }

  void Submit(const IoRequest& req, IoDone done);

  void Read(uint64_t offset, uint64_t len, void* buf, IoDone done) {
    Submit({IoOp::kRead, 0, offset, len, buf}, std::move(done));
  }
  void Write(uint64_t offset, uint64_t len, const void* buf, uint32_t flags, IoDone done) {
    Submit({IoOp::kWrite, flags, offset, len, const_cast<void*>(buf)}, std::move(done));
  }
  void Flush(IoDone done) { Submit({IoOp::kFlush, 0, 0, 0, nullptr}, std::move(done)); }
  void Discard(uint64_t offset, uint64_t len, IoDone done) {
    Submit({IoOp::kDiscard, 0, offset, len, nullptr}, std::move(done));
  }
  void WriteZeroes(uint64_t offset, uint64_t len, uint32_t flags, IoDone done) {
    Submit({IoOp::kWriteZeroes, flags, offset, len, nullptr}, std::move(done));
  }

  // Checks a request without submitting it; the error names the device.
  Status Validate(const IoRequest& req) const;

  // One line for logs: "uring /data/cache.img (1.0 GiB, O_DIRECT)".
  virtual std::string Describe() const { return spec_; }

  // Whether a seek costs milliseconds. Decides whether a backing device gets
  // a DeadlineScheduler (serve --backing-scheduler auto). Only the spindle
  // model says yes today: the kernel's own "rotational" flag is 1 for most
  // virtual disks (virtio-blk over NVMe here), and a real spindle has the
  // kernel's scheduler below us already; `--backing-scheduler deadline`
  // asks for ours on any device.
  virtual bool rotational() const { return false; }

  // A hint that [offset, offset+len) will be read soon (NBD_CMD_CACHE). A
  // device with nothing to warm completes it at once; the cache reads the
  // range in, as bcache does for readahead. The range is validated like a read.
  void Prefetch(uint64_t offset, uint64_t len, IoDone done);

  // Fencing, for devices that another host can take over (rbd:, whose
  // exclusive lock another client can break): the device calls `on_fence`
  // once, from a thread of its own, when this process lost the right to
  // write it, and fails every request from then on. `why` is one line
  // ("blocklisted by the cluster"). Setting an empty function waits for a
  // call in progress. Devices nobody else can take never call it.
  using FenceHandler = std::function<void(const std::string& why)>;
  virtual void SetFenceHandler(FenceHandler on_fence) {}

  // Online growth (ctl resize, an rbd: image resized by its owner): takes
  // the size the storage below has now and returns it. A device stack grows
  // from the bottom up — each layer grows the one below first, then takes
  // its own new size from it — so a request that saw a layer's new size
  // finds every layer under it grown too. A smaller size is refused with
  // kInvalidArgument and nothing changes: data past the new end may still be
  // dirty in a cache above. Devices whose size cannot change (mem:, nbd:,
  // whose size is the remote's at connect) keep theirs and return it.
  // Callers serialize Grow calls; requests may run meanwhile.
  virtual Result<uint64_t> Grow() { return size(); }

  // Growth, for devices that follow their storage on their own (rbd:'s
  // image watch): the device calls `on_resize` from a thread of its own
  // when the storage's size changed; the handler then grows the whole stack
  // (the same path as ctl resize). Setting an empty function waits for a
  // call in progress. Devices that never notice a change never call it.
  using ResizeHandler = std::function<void()>;
  virtual void SetResizeHandler(ResizeHandler on_resize) {}

 protected:
  BlockDevice(std::string spec, uint64_t size, uint32_t block_size, bool read_only)
      : spec_(std::move(spec)), size_(size), block_size_(block_size), read_only_(read_only) {}

  // Called with a validated request on a reactor thread.
  virtual void DoSubmit(const IoRequest& req, IoDone done) = 0;
  // Called with a validated range; the default has nothing to warm.
  virtual void DoPrefetch(uint64_t offset, uint64_t len, IoDone done) {
    CompleteLater(std::move(done), Status::OK());
  }

  // Delivers `st` to `done` on the current reactor after the caller returns.
  static void CompleteLater(IoDone done, Status st);

  // Takes `new_size` unless it is smaller than the current size (then
  // kInvalidArgument naming both, and the size stays): the one place a
  // device's size changes after construction.
  Status SetGrownSize(uint64_t new_size);

  std::string spec_;
  std::atomic<uint64_t> size_;
  uint32_t block_size_;
  bool read_only_;
};

struct OpenOptions {
  bool read_only = false;
  // Refuse to fall back to buffered I/O when O_DIRECT is refused.
  bool require_direct = false;
};

// Opens a device from its spec:
//   PATH | file:PATH                  file or block device, io_uring + O_DIRECT
//   mem:SIZE                          RAM
//   nbd:URI                           remote NBD export through libnbd
//   sas:SPEC                          10k rpm SAS spindle model over SPEC
//   hdd[,rpm=R][,seek_ms=S][,mbps=M][,seed=N]:SPEC   spindle model, tuned
//   fault[,eio=OFF+LEN][,eio_p=P][,ops=r|w|rw][,latency_us=N][,drop_unflushed=1]
//        [,tear_unflushed=1][,seed=N]:SPEC   faults; tear_unflushed tears unflushed writes
// Errors name the spec: "bad device spec 'mem:xyz': bad size 'xyz' ...".
Result<std::unique_ptr<BlockDevice>> OpenDevice(std::string_view spec, const OpenOptions& opts = {});

// One paragraph for --help texts.
const char* DeviceSpecHelp();

}  // namespace ubcache
