// SPDX-License-Identifier: Apache-2.0
// RbdDevice: a Ceph RBD image as a block device, through librbd's
// asynchronous C API ("rbd:rbd/disk", "rbd,conf=/etc/ceph/ceph.conf,
// id=ubcache:rbd/disk"). This is how a ubcache cache fronts a Ceph cluster
// without the krbd kernel module.
//
// One cluster connection and one image handle per device: librbd's
// exclusive lock belongs to an image handle, and two handles of one
// process would pass it back and forth. Completions are not taken from
// librbd's callback thread (a thread hop per request): the image notifies
// an eventfd (rbd_set_image_notification), which every reactor with
// requests in flight polls on its own ring. The reactor that wakes reaps
// the finished completions (rbd_poll_io_events); those it submitted run
// at once, the others go to their reactor in one Post per batch.
//
// Bounded waits: connecting, and every operation on the cluster, give up
// after `timeout` seconds (rados_mon_op_timeout, rados_osd_op_timeout,
// client_mount_timeout): an unreachable cluster or an OSD that stopped
// answering fails a request with EIO (ETIMEDOUT) rather than hanging it.
//
// FUA is a write followed by a flush of the image; discard is
// rbd_aio_discard, write-zeroes rbd_aio_write_zeroes.
//
// Ownership: a read-write open takes the image's exclusive lock in
// exclusive mode (librbd will not hand it to a client that asks), so a
// second cache on the same image is refused at open, by the holder's name.
// Losing it later — another client broke it (`rbd lock rm`, which also
// blocklists us), or the cluster blocklisted this client — fences the
// device: a thread asks the cluster who holds the lock every second (and at
// once when a request fails as a blocklisted client's do); when it is
// blocklisted, or the lock names someone else on two checks running, every
// request fails with EIO from then on and the fence handler runs (the cache
// stops serving and writing back, and records the fence). Between the
// break and the check, the OSDs refuse a blocklisted client's writes: that
// is Ceph's own fence, and why breaking a lock without blocklisting
// (rbd_blocklist_on_break_lock false) is unsafe with any client.
//
// Growth: the image's header watch (rbd_update_watch) tells us when
// another client changed the image (`rbd resize` on any host); the watch
// thread then reads the size again and, when it grew, calls the resize
// handler, which grows the device stack above (BlockDevice::Grow; serve
// points it at the same path as `ctl resize`). A read-only open has the
// thread for this alone. librbd calls the watch callback on its own thread,
// where a call back into librbd could wait on that thread: the callback
// only wakes ours.
//
// Lifetime: destroy the device only when no reactor will run again with
// polls for it outstanding (after the reactors stop), like NbdDevice.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/block_device.h"
#include "util/thread_annotations.h"

namespace ubcache {

struct RbdSpec {
  std::string pool = "rbd";
  std::string image;
  std::string conf;     // empty: librados's default search (/etc/ceph/ceph.conf, CEPH_CONF)
  std::string id;       // client id without "client." (default: admin)
  std::string cluster;  // default: ceph
  std::string keyring;  // default: the conf's
  unsigned timeout_s = 30;
};

// "[POOL/]IMAGE" and the wrapper's options (conf=, id=, cluster=, keyring=,
// timeout=).
Result<RbdSpec> ParseRbdSpec(const std::vector<std::string>& options, const std::string& rest);

class RbdDevice final : public BlockDevice {
 public:
  static Result<std::unique_ptr<RbdDevice>> Open(const std::string& spec, const RbdSpec& rbd,
                                                 const OpenOptions& opts);
  ~RbdDevice() override;
  std::string Describe() const override;
  void SetFenceHandler(FenceHandler on_fence) override;
  Result<uint64_t> Grow() override;
  void SetResizeHandler(ResizeHandler on_resize) override;

  static constexpr unsigned kOwnershipCheckMs = 1000;

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override;

 private:
  struct Op;  // one librbd command's state (rbd_device.cpp)
  class Waiter;
  RbdDevice(std::string spec, RbdSpec rbd, uint64_t size, bool read_only, void* cluster, void* ioctx,
            void* image, int event_fd);
  // A reactor's poll on the eventfd fired: reap and route completions.
  void Reap();
  void Finish(Op* op);  // on the op's reactor
  Waiter& WaiterFor(Reactor* r);
  // The watch thread: ownership (read-write opens) and size (see the top).
  void WatchImage();
  // librbd's header-update callback: wakes the watch thread.
  static void HeaderUpdated(void* self);
  // The image's size changed since the last look: run the resize handler.
  void CheckSize();
  // Why the image is no longer ours, or "" while it is (or the cluster
  // cannot say: an outage is not a fence). `strikes` counts checks running
  // that found the lock in other hands.
  std::string CheckOwnership(int& strikes);
  void CheckSoon();  // a request failed as a fenced client's would
  void Fence(const std::string& why);

  RbdSpec rbd_;
  void* cluster_;  // rados_t
  void* ioctx_;    // rados_ioctx_t
  void* image_;    // rbd_image_t
  int event_fd_;
  Mutex reap_mu_;  // one reaper at a time: completions are routed in order
  // One per reactor id, made on its first request; touched only by it.
  std::array<std::unique_ptr<Waiter>, Reactor::kMaxReactors> waiters_;

  std::string lock_owner_;  // this client in the lock, as rbd_lock_get_owners names it
  std::string fence_reason_;  // set once, before fenced_
  std::atomic<bool> fenced_{false};
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;  // under watch_mu_
  bool check_now_ = false;   // under watch_mu_
  bool header_updated_ = false;  // under watch_mu_
  uint64_t update_watch_ = 0;    // rbd_update_watch's handle
  bool update_watched_ = false;
  uint64_t last_seen_size_ = 0;  // the watch thread's: the size it last acted on
  std::mutex handler_mu_;    // held while on_fence_ or on_resize_ runs
  FenceHandler on_fence_;    // under handler_mu_
  ResizeHandler on_resize_;  // under handler_mu_
  std::thread watch_;        // last: joined first
};

}  // namespace ubcache
