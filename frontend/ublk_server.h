// SPDX-License-Identifier: Apache-2.0
// UblkServer: serves BlockDevices as /dev/ublkbN block devices through the
// kernel's ublk driver — one ublk device per export.
//
// Start() creates each device through /dev/ublk-control (ADD_DEV with the
// features this kernel offers, SET_PARAMS, then the queue threads, then
// START_DEV, which reads the device for its partition scan and so needs the
// queues already serving), or with `recover` reattaches devices a killed
// server left behind (START_USER_RECOVERY, queues, END_USER_RECOVERY); the
// driver reissues the requests the dead server had in flight. With
// `recover_auto` each id is reattached when a device with it exists and
// added when none does: one command line both starts the devices and takes
// them over after a crash (what a service manager's restart needs).
//
// Stop() is STOP_DEV (the kernel drains the device and aborts our pending
// fetches), then a flush of every export, then the queue threads end and
// release /dev/ublkcN, then DEL_DEV. A second SIGINT/SIGTERM while stopping
// gives up waiting and returns at once.
//
// HandOff() stops without taking the devices away, for the next server (an
// upgrade, a restart): every queue holds the requests that arrive from then
// on (UblkQueue::Hold), the ones in flight finish, every export is flushed,
// and the queue threads end with no STOP_DEV or DEL_DEV. The driver then
// sees a server gone, as after a kill -9: it quiesces each /dev/ublkbN and
// keeps its I/O — the held requests included — waiting for the next
// server's START/END_USER_RECOVERY (`--recover`), which it reissues to.
// The filesystem above sees a pause, not an error. Needs
// USER_RECOVERY_REISSUE on every device (a held request would otherwise
// fail); a device without it is stopped and deleted as by Stop().
// UpdateSize() gives a device its export's new size (after the export grew:
// ctl resize, an rbd: image resized) through UPDATE_SIZE, which the kernel
// offers from Linux 6.16 (UBLK_F_UPDATE_SIZE). Without it the device keeps
// its size and UpdateSize says so in one line; the export has grown all the
// same (its NBD clients see it), and requests past the device's end never
// come. A device reattached by --recover may then be smaller than its
// export: it is taken as it is (and grown when the kernel can).
//
// The frontend holds no policy: each queue maps requests onto BlockDevice
// calls, exactly as the NBD server does. The server never opens /dev/ublkbN.
//
// Thread safety: Start(), WaitForSignal() and Stop() from one thread;
// UpdateSize() from any thread between Start() and Stop() (it takes
// ctrl_mu_, which Stop() takes once to end UpdateSize calls).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/block_device.h"
#include "frontend/ublk_control.h"
#include "frontend/ublk_queue.h"
#include "util/status.h"
#include "util/thread_annotations.h"

namespace ubcache {

struct UblkExport {
  std::string name;
  BlockDevice* device = nullptr;  // not owned; outlives the server
  bool read_only = false;
  uint32_t io_opt = 0;  // preferred I/O size (the cache bucket), 0: none
};

struct UblkServerOptions {
  int first_id = -1;     // device id of the first export (then +1, ...); -1: any free
  bool recover = false;  // reattach the devices at first_id.. instead of adding
  bool recover_auto = false;  // reattach those that exist, add the others (needs first_id)
  unsigned queues = 0;   // 0: one per core
  unsigned depth = 128;
  uint32_t max_io_bytes = 512 * 1024;
};

// SET_PARAMS for an export: its block sizes and size, io_opt, requests of at
// most `max_io_bytes`, discard/write-zeroes limits (not when read-only), a
// volatile write cache with FUA.
ublk::Params UblkParamsFor(const UblkExport& e, uint32_t max_io_bytes);

// UpdateSize's decision for a device of `device_bytes` whose export has
// `export_bytes` now, with the driver's `features`: nullopt when there is
// nothing to do, the size to send with UPDATE_SIZE (whole sectors), or why
// not in one line naming `path` — NotSupported without kFUpdateSize,
// InvalidArgument for a smaller size.
Result<std::optional<uint64_t>> UblkGrowth(uint64_t features, uint64_t device_bytes, uint64_t export_bytes,
                                           const std::string& path, const std::string& export_name);

class UblkServer {
 public:
  UblkServer(std::vector<UblkExport> exports, UblkServerOptions options);
  ~UblkServer();  // Stop()s if needed

  Status Start();
  // Blocks until SIGINT or SIGTERM (blocked by the caller before any thread
  // started).
  void WaitForSignal();
  // Stops and deletes every device; returns the first flush or control error.
  Status Stop();
  // Leaves every device in place with its I/O held (above); returns the
  // first flush error.
  Status HandOff();
  // Export `index`'s device to its export's size now; a no-op when they
  // agree. NotSupported (one line, naming the missing kernel feature) when
  // the kernel cannot resize a ublk device; InvalidArgument for a smaller size.
  Status UpdateSize(size_t index) EXCLUDES(ctrl_mu_);

  static std::string BlockPath(uint32_t id);  // "/dev/ublkb0"

 private:
  struct Dev {
    UblkExport exp;
    uint32_t id = 0;
    bool added = false;
    bool started = false;
    uint64_t flags = 0;  // the device's UBLK_F_* as added
    int char_fd = -1;
    uint64_t bytes = 0;  // the block device's size, as the kernel has it
    std::vector<std::unique_ptr<UblkQueue>> queues;
  };
  Status StartOne(Dev& d, uint64_t features);
  Status RecoverOne(Dev& d, uint64_t features);
  Status OpenCharDev(Dev& d);
  Status StartQueues(Dev& d, unsigned nr_queues, unsigned depth, uint32_t max_io, bool user_copy);
  // Waits until every queue of `d` drained (or stays backend-idle past a
  // grace period); false on a second signal.
  bool WaitDrained(Dev& d);
  Status FlushExport(Dev& d);
  Status UpdateSizeLocked(Dev& d) REQUIRES(ctrl_mu_);
  void ReleaseQueues(Dev& d);
  bool SecondSignal();

  std::vector<Dev> devs_;
  UblkServerOptions options_;
  uint64_t features_ = 0;  // the driver's (GET_FEATURES)
  std::unique_ptr<UblkControl> ctrl_;
  Mutex ctrl_mu_;  // UpdateSize's use of ctrl_ against Stop's
  bool stopping_ GUARDED_BY(ctrl_mu_) = false;
  int signal_fd_ = -1;
  bool abandoned_ = false;  // a second signal: stop waiting for anything
};

}  // namespace ubcache
