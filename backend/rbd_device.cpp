// SPDX-License-Identifier: Apache-2.0
#include "backend/rbd_device.h"

#include <poll.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <unordered_map>

#include "util/log.h"
#include "util/size.h"
#include "util/thread.h"

namespace ubcache {

Result<RbdSpec> ParseRbdSpec(const std::vector<std::string>& options, const std::string& rest) {
  RbdSpec s;
  for (const std::string& opt : options) {
    auto eq = opt.find('=');
    if (eq == std::string::npos || eq + 1 == opt.size())
      return Status::InvalidArgument("rbd option '" + opt + "' needs =VALUE");
    std::string key = opt.substr(0, eq), val = opt.substr(eq + 1);
    if (key == "conf") {
      s.conf = val;
    } else if (key == "id") {
      s.id = val.rfind("client.", 0) == 0 ? val.substr(7) : val;
    } else if (key == "cluster") {
      s.cluster = val;
    } else if (key == "keyring") {
      s.keyring = val;
    } else if (key == "timeout") {
      UB_ASSIGN_OR_RETURN(uint64_t t, ParseUint(val, 1, 3600, "rbd option timeout (seconds)"));
      s.timeout_s = static_cast<unsigned>(t);
    } else {
      return Status::InvalidArgument("unknown rbd option '" + key + "' (conf, id, cluster, keyring, timeout)");
    }
  }
  if (rest.empty()) return Status::InvalidArgument("rbd: needs [POOL/]IMAGE, e.g. rbd:rbd/disk");
  auto slash = rest.find('/');
  if (slash != std::string::npos) {
    s.pool = rest.substr(0, slash);
    s.image = rest.substr(slash + 1);
    if (s.pool.empty()) return Status::InvalidArgument("rbd: empty pool name in '" + rest + "'");
  } else {
    s.image = rest;
  }
  if (s.image.empty() || s.image.find('/') != std::string::npos || s.image.find('@') != std::string::npos)
    return Status::InvalidArgument("rbd: bad image name in '" + rest + "' ([POOL/]IMAGE; snapshots are not served)");
  return s;
}

// One librbd command. A FUA write is a write, then (once it completed) a
// flush, through the same op.
struct RbdDevice::Op {
  Reactor* owner;
  IoDone done;
  IoOp op;
  bool flush_after = false;  // FUA: the flush is still to come
  ssize_t ret = 0;
  uint64_t offset = 0;
};

// A reactor's view of the device: its requests in flight and its poll on
// the image's eventfd, armed while any is.
class RbdDevice::Waiter final : public IoCompletion {
 public:
  explicit Waiter(RbdDevice* d) : dev_(d) {}
  void Started() {
    inflight_++;
    Arm();
  }
  void Ended() { inflight_--; }
  void Arm() {
    if (armed_ || inflight_ == 0) return;
    armed_ = true;
    io_uring_sqe* sqe = Reactor::Current()->PrepareSqe(this);
    io_uring_prep_poll_add(sqe, dev_->event_fd_, POLLIN);
  }
  void Complete(int32_t res, uint32_t) override {
    armed_ = false;
    if (res < 0 && res != -EINTR && res != -ECANCELED) UB_WARN("{}: poll: {}", dev_->spec(), res);
    dev_->Reap();
    Arm();
  }

 private:
  RbdDevice* dev_;
  uint64_t inflight_ = 0;
  bool armed_ = false;
};

namespace {

Status RadosError(const std::string& spec, const std::string& what, int ret) {
  return Status::FromErrno(-ret, spec + ": " + what);
}

// The addresses holding the image's lock, as the cluster says now; an
// error (ESHUTDOWN: this client is blocklisted; ETIMEDOUT: no answer) as is.
Result<std::vector<std::string>> LockOwnersOrError(rbd_image_t image, int* err) {
  rbd_lock_mode_t mode;
  char* owners[8];
  size_t n = 8;
  int r = rbd_lock_get_owners(image, &mode, owners, &n);
  *err = r == -ENOENT ? 0 : r;  // ENOENT: nobody holds it
  if (r == -ENOENT) return std::vector<std::string>{};
  if (r < 0) return Status::FromErrno(-r, "rbd_lock_get_owners");
  std::vector<std::string> out(owners, owners + n);
  rbd_lock_get_owners_cleanup(owners, n);
  return out;
}

std::optional<std::vector<std::string>> LockOwners(rbd_image_t image) {
  int err;
  auto r = LockOwnersOrError(image, &err);
  if (!r.ok()) return std::nullopt;
  return *r;
}

// Who holds the image's exclusive lock ("client.4151 at 10.0.0.5:0/1234"),
// or "": the lock names an address; the image's watchers give its client.
std::string LockHolders(rbd_image_t image) {
  auto owners = LockOwners(image);
  if (!owners) return "";
  rbd_image_watcher_t watchers[16];
  size_t nw = 16;
  bool have_watchers = rbd_watchers_list(image, watchers, &nw) >= 0;
  std::string out;
  for (size_t i = 0; i < owners->size(); i++) {
    const std::string& owner = (*owners)[i];
    std::string who;
    for (size_t j = 0; have_watchers && j < nw; j++)
      if (owner == watchers[j].addr) who = "client." + std::to_string(watchers[j].id) + " at ";
    out += (i ? ", " : "") + who + owner;
  }
  if (have_watchers) rbd_watchers_list_cleanup(watchers, nw);
  return out;
}

// Images open for writing. A command that exits on an error (Die: exit()
// runs no destructors) would leave its lock and its watch on the image
// header until the cluster times the client out (~30 s): the next open
// would wait for the lock, and the next close for the dead watcher to ack
// the lock's release. exit() closes them instead (unwatch, release).
std::mutex g_open_mu;
std::vector<rbd_image_t> g_open;  // under g_open_mu

void CloseAtExit() {
  std::lock_guard<std::mutex> l(g_open_mu);
  for (rbd_image_t image : g_open) (void)rbd_close(image);
  g_open.clear();
}

void RememberOpen(rbd_image_t image, bool open) {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(CloseAtExit); });
  std::lock_guard<std::mutex> l(g_open_mu);
  if (open)
    g_open.push_back(image);
  else
    std::erase(g_open, image);
}

}  // namespace

Result<std::unique_ptr<RbdDevice>> RbdDevice::Open(const std::string& spec, const RbdSpec& rbd,
                                                   const OpenOptions& opts) {
  rados_t cluster = nullptr;
  std::string name = "client." + (rbd.id.empty() ? std::string("admin") : rbd.id);
  int r = rados_create2(&cluster, rbd.cluster.empty() ? "ceph" : rbd.cluster.c_str(), name.c_str(), 0);
  if (r < 0) return RadosError(spec, "rados_create2 for " + name, r);
  // From here on, every failure shuts the handle down.
  auto fail = [&](Status st) -> Status {
    rados_shutdown(cluster);
    return st;
  };
  r = rados_conf_read_file(cluster, rbd.conf.empty() ? nullptr : rbd.conf.c_str());
  if (r < 0)
    return fail(RadosError(spec, rbd.conf.empty() ? "no ceph.conf found (give conf=PATH)"
                                                  : "cannot read conf " + rbd.conf, r));
  if (!rbd.keyring.empty() && (r = rados_conf_set(cluster, "keyring", rbd.keyring.c_str())) < 0)
    return fail(RadosError(spec, "keyring " + rbd.keyring, r));
  std::string t = std::to_string(rbd.timeout_s);
  for (const char* key : {"client_mount_timeout", "rados_mon_op_timeout", "rados_osd_op_timeout"}) {
    if ((r = rados_conf_set(cluster, key, t.c_str())) < 0) return fail(RadosError(spec, key, r));
  }
  // A write to an object the image has not allocated yet first marks it in
  // the object map; when that update times out librbd would spend a second
  // timeout marking the whole map invalid before failing the write. The
  // write never reached the object, so the map is still right: fail it at
  // timeout= (the bound the spec promises).
  if ((r = rados_conf_set(cluster, "rbd_invalidate_object_map_on_timeout", "false")) < 0)
    return fail(RadosError(spec, "rbd_invalidate_object_map_on_timeout", r));
  // ubcache is the cache: librbd's own writeback cache off, so a write is
  // on the OSDs when it completes and a flush has nothing of its own to do.
  if ((r = rados_conf_set(cluster, "rbd_cache", "false")) < 0) return fail(RadosError(spec, "rbd_cache", r));
  // librados logs to a file named by the conf; never to our stderr.
  rados_conf_set(cluster, "log_to_stderr", "false");
  rados_conf_set(cluster, "err_to_stderr", "false");
  r = rados_connect(cluster);
  if (r < 0) {
    std::string why = r == -ENOENT ? " (no key for " + name + ": keyring=PATH?)" : " (within " + t + " s)";
    return fail(RadosError(spec, "cannot connect to the cluster as " + name + why, r));
  }
  rados_ioctx_t io = nullptr;
  r = rados_ioctx_create(cluster, rbd.pool.c_str(), &io);
  if (r < 0) return fail(RadosError(spec, r == -ENOENT ? "no pool '" + rbd.pool + "'" : "pool " + rbd.pool, r));
  rbd_image_t image = nullptr;
  r = opts.read_only ? rbd_open_read_only(io, rbd.image.c_str(), &image, nullptr)
                     : rbd_open(io, rbd.image.c_str(), &image, nullptr);
  if (r < 0) {
    rados_ioctx_destroy(io);
    return fail(RadosError(spec, r == -ENOENT ? "no image '" + rbd.image + "' in pool '" + rbd.pool + "'"
                                              : "cannot open image " + rbd.image, r));
  }
  auto close_all = [&](Status st) -> Status {
    rbd_close(image);
    rados_ioctx_destroy(io);
    return fail(std::move(st));
  };
  uint64_t size = 0;
  if ((r = rbd_get_size(image, &size)) < 0) return close_all(RadosError(spec, "size", r));
  if (!opts.read_only) {
    // Exclusive ownership: the image's lock, held in exclusive mode, so
    // librbd does not hand it to another client that asks for it. A
    // second cache on the same image (another host, another client id)
    // would overwrite this one's data, and this one's dirty data theirs.
    // A daemon killed while it held the lock keeps it until the cluster
    // times its watch out (osd_client_watch_timeout, 30 s); librbd then
    // breaks it for us. So a held lock is asked for again each second, up
    // to the timeout, before the open gives up naming the holder.
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(rbd.timeout_s);
    bool told = false;
    while ((r = rbd_lock_acquire(image, RBD_LOCK_MODE_EXCLUSIVE)) == -EROFS || r == -EBUSY) {
      if (std::chrono::steady_clock::now() >= give_up) break;
      if (!told) {
        std::string holder = LockHolders(image);
        UB_WARN("{}: the image's exclusive lock is held{}; waiting up to {} s (a crashed holder's lock is freed "
                "when the cluster times it out)", spec, holder.empty() ? "" : " by " + holder, rbd.timeout_s);
        told = true;
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (r < 0) {
      std::string holder = LockHolders(image);
      std::string what = r == -EOPNOTSUPP
                             ? "the image lacks the exclusive-lock feature (rbd feature enable " + rbd.pool + "/" +
                                   rbd.image + " exclusive-lock)"
                             : "cannot take the image's exclusive lock" +
                                   (holder.empty() ? std::string() : ": held by " + holder);
      return close_all(RadosError(spec, what, r));
    }
  }
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd < 0) return close_all(Status::FromErrno(errno, spec + ": eventfd"));
  if ((r = rbd_set_image_notification(image, efd, EVENT_TYPE_EVENTFD)) < 0) {
    close(efd);
    return close_all(RadosError(spec, "rbd_set_image_notification", r));
  }
  size -= size % 512;
  std::unique_ptr<RbdDevice> dev(new RbdDevice(spec, rbd, size, opts.read_only, cluster, io, image, efd));
  dev->last_seen_size_ = size;
  if (!opts.read_only) {
    auto owners = LockOwners(image);
    if (owners && !owners->empty()) dev->lock_owner_ = owners->front();
    RememberOpen(image, true);
  }
  // The thread's first turn reads the size once more (header_updated_), so
  // a resize between the reading above and the watch's start is not missed.
  if ((r = rbd_update_watch(image, &dev->update_watch_, &RbdDevice::HeaderUpdated, dev.get())) < 0)
    UB_WARN("{}: rbd_update_watch: {}; a resize of the image needs `ubcache ctl resize`", spec, strerror(-r));
  else
    dev->update_watched_ = true;
  dev->header_updated_ = true;
  dev->watch_ = std::thread([d = dev.get()] { d->WatchImage(); });
  return dev;
}

RbdDevice::RbdDevice(std::string spec, RbdSpec rbd, uint64_t size, bool read_only, void* cluster,
                     void* ioctx, void* image, int event_fd)
    : BlockDevice(std::move(spec), size, 512, read_only),
      rbd_(std::move(rbd)),
      cluster_(cluster),
      ioctx_(ioctx),
      image_(image),
      event_fd_(event_fd) {}

RbdDevice::~RbdDevice() {
  // No callback into a device being destroyed: unwatch waits for one running.
  if (update_watched_) (void)rbd_update_unwatch(static_cast<rbd_image_t>(image_), update_watch_);
  if (watch_.joinable()) {
    {
      std::lock_guard<std::mutex> l(watch_mu_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    watch_.join();
  }
  // Completions reaped by nobody (the reactors are gone): released while
  // the image is open; nothing may be in flight by now (see the header).
  rbd_completion_t comps[64];
  int n;
  while ((n = rbd_poll_io_events(static_cast<rbd_image_t>(image_), comps, 64)) > 0)
    for (int i = 0; i < n; i++) {
      delete static_cast<Op*>(rbd_aio_get_arg(comps[i]));
      rbd_aio_release(comps[i]);
    }
  if (!read_only_) RememberOpen(static_cast<rbd_image_t>(image_), false);
  rbd_close(static_cast<rbd_image_t>(image_));
  rados_ioctx_destroy(static_cast<rados_ioctx_t>(ioctx_));
  rados_shutdown(static_cast<rados_t>(cluster_));
  close(event_fd_);
}

std::string RbdDevice::Describe() const {
  return spec_ + " (RBD image " + rbd_.pool + "/" + rbd_.image + ", " + FormatSize(size()) + ")";
}

RbdDevice::Waiter& RbdDevice::WaiterFor(Reactor* r) {
  auto& w = waiters_[r->id()];
  if (!w) w = std::make_unique<Waiter>(this);
  return *w;
}

namespace {

int Issue(rbd_image_t image, IoOp op, const IoRequest& req, rbd_completion_t c) {
  switch (op) {
    case IoOp::kRead: return rbd_aio_read(image, req.offset, req.len, static_cast<char*>(req.buf), c);
    case IoOp::kWrite: return rbd_aio_write(image, req.offset, req.len, static_cast<const char*>(req.buf), c);
    case IoOp::kFlush: return rbd_aio_flush(image, c);
    case IoOp::kDiscard: return rbd_aio_discard(image, req.offset, req.len, c);
    case IoOp::kWriteZeroes: return rbd_aio_write_zeroes(image, req.offset, req.len, c, 0, 0);
  }
  return -EINVAL;
}

}  // namespace

void RbdDevice::SetFenceHandler(FenceHandler on_fence) {
  std::lock_guard<std::mutex> l(handler_mu_);
  on_fence_ = std::move(on_fence);
}

void RbdDevice::SetResizeHandler(ResizeHandler on_resize) {
  std::lock_guard<std::mutex> l(handler_mu_);
  on_resize_ = std::move(on_resize);
}

Result<uint64_t> RbdDevice::Grow() {
  uint64_t size = 0;
  int r = rbd_get_size(static_cast<rbd_image_t>(image_), &size);
  if (r < 0) return RadosError(spec_, "size", r);
  size -= size % logical_block_size();
  UB_RETURN_IF_ERROR(SetGrownSize(size));
  return size;
}

void RbdDevice::HeaderUpdated(void* self) {
  auto* d = static_cast<RbdDevice*>(self);
  {
    std::lock_guard<std::mutex> l(d->watch_mu_);
    d->header_updated_ = true;
  }
  d->watch_cv_.notify_all();
}

void RbdDevice::CheckSize() {
  uint64_t size = 0;
  int r = rbd_get_size(static_cast<rbd_image_t>(image_), &size);
  if (r < 0) {
    UB_WARN("{}: cannot read the image's size after an update: {}", spec_, strerror(-r));
    return;
  }
  size -= size % logical_block_size();
  // Header updates come for other changes too (locks, snapshots): only a
  // new size is acted on, and only once.
  if (size == last_seen_size_) return;
  UB_INFO("{}: the image was resized from {} to {}", spec_, FormatSize(last_seen_size_), FormatSize(size));
  last_seen_size_ = size;
  std::lock_guard<std::mutex> l(handler_mu_);
  if (on_resize_) on_resize_();
}

void RbdDevice::WatchImage() {
  SetThreadName(read_only_ ? "ub-rbd-size" : "ub-rbd-owner");
  int strikes = 0;
  std::unique_lock<std::mutex> l(watch_mu_);
  while (!watch_stop_) {
    watch_cv_.wait_for(l, std::chrono::milliseconds(kOwnershipCheckMs),
                       [this] { return watch_stop_ || check_now_ || header_updated_; });
    if (watch_stop_) return;
    bool size_check = header_updated_;
    check_now_ = header_updated_ = false;
    l.unlock();
    if (size_check && !fenced_.load(std::memory_order_acquire)) CheckSize();
    if (!read_only_) {
      std::string lost = CheckOwnership(strikes);
      if (!lost.empty()) {
        Fence(lost);
        return;
      }
    }
    l.lock();
  }
}

std::string RbdDevice::CheckOwnership(int& strikes) {
  auto* image = static_cast<rbd_image_t>(image_);
  int err = 0;
  auto owners = LockOwnersOrError(image, &err);
  if (err == -ESHUTDOWN) return "this client (" + lock_owner_ + ") was blocklisted by the cluster";
  if (!owners.ok()) return "";  // no answer: an outage, not a fence
  if (!lock_owner_.empty() &&
      std::find(owners->begin(), owners->end(), lock_owner_) != owners->end()) {
    strikes = 0;
    return "";
  }
  // Not ours: twice running, so a lock librbd is re-taking after a lost
  // watch (an OSD restart) is not taken for a stolen one.
  if (++strikes < 2) {
    CheckSoon();
    return "";
  }
  std::string holder = LockHolders(image);
  return holder.empty() ? "the image's exclusive lock was broken (it was " + lock_owner_ + "'s)"
                        : "the image's exclusive lock was taken by " + holder;
}

void RbdDevice::CheckSoon() {
  {
    std::lock_guard<std::mutex> l(watch_mu_);
    check_now_ = true;
  }
  watch_cv_.notify_all();
}

void RbdDevice::Fence(const std::string& why) {
  fence_reason_ = why;
  fenced_.store(true, std::memory_order_release);
  UB_ERROR("{}: fenced: {}; every request fails from now on", spec_, why);
  std::lock_guard<std::mutex> l(handler_mu_);
  if (on_fence_) on_fence_(why);
}

void RbdDevice::DoSubmit(const IoRequest& req, IoDone done) {
  if (fenced_.load(std::memory_order_acquire)) {
    CompleteLater(std::move(done), Status::IoError(spec_ + ": " + IoOpName(req.op) + " refused: fenced (" +
                                                   fence_reason_ + ")"));
    return;
  }
  Reactor* r = Reactor::Current();
  auto* op = new Op{r, std::move(done), req.op};
  op->offset = req.offset;
  op->flush_after = req.op == IoOp::kWrite && (req.flags & kIoFua);
  rbd_completion_t c = nullptr;
  int ret = rbd_aio_create_completion(op, nullptr, &c);
  if (ret == 0) {
    ret = Issue(static_cast<rbd_image_t>(image_), req.op, req, c);
    if (ret < 0) rbd_aio_release(c);
  }
  if (ret < 0) {
    IoDone d = std::move(op->done);
    delete op;
    CompleteLater(std::move(d), Status::FromErrno(-ret, spec_ + ": " + IoOpName(req.op) + " at " +
                                                            std::to_string(req.offset)));
    return;
  }
  WaiterFor(r).Started();
}

void RbdDevice::Reap() {
  uint64_t count;
  [[maybe_unused]] ssize_t n = read(event_fd_, &count, sizeof count);  // EAGAIN: another reactor took it
  Reactor* self = Reactor::Current();
  std::vector<Op*> mine;
  std::unordered_map<Reactor*, std::vector<Op*>> others;
  {
    MutexLock l(&reap_mu_);
    rbd_completion_t comps[64];
    for (;;) {
      int got = rbd_poll_io_events(static_cast<rbd_image_t>(image_), comps, 64);
      if (got <= 0) break;
      for (int i = 0; i < got; i++) {
        auto* op = static_cast<Op*>(rbd_aio_get_arg(comps[i]));
        op->ret = rbd_aio_get_return_value(comps[i]);
        rbd_aio_release(comps[i]);
        if (op->owner == self)
          mine.push_back(op);
        else
          others[op->owner].push_back(op);
      }
      if (got < 64) break;
    }
  }
  for (Op* op : mine) Finish(op);
  for (auto& [reactor, ops] : others)
    reactor->Post([this, ops = std::move(ops)] {
      for (Op* op : ops) Finish(op);
    });
}

void RbdDevice::Finish(Op* op) {
  Waiter& w = WaiterFor(op->owner);
  w.Ended();
  if (op->ret >= 0 && op->flush_after) {
    // FUA: the write is done; now make it durable.
    op->flush_after = false;
    rbd_completion_t c = nullptr;
    int ret = rbd_aio_create_completion(op, nullptr, &c);
    if (ret == 0 && (ret = rbd_aio_flush(static_cast<rbd_image_t>(image_), c)) < 0) rbd_aio_release(c);
    if (ret == 0) {
      w.Started();
      return;
    }
    op->ret = ret;
  }
  // A blocklisted client's requests fail with ESHUTDOWN; a write without
  // the lock with EROFS: look at the lock now rather than within a second.
  if (op->ret == -ESHUTDOWN || (op->ret == -EROFS && op->op != IoOp::kRead)) CheckSoon();
  Status st = op->ret < 0 ? Status::FromErrno(static_cast<int>(-op->ret),
                                              spec_ + ": " + IoOpName(op->op) + " at " + std::to_string(op->offset))
                          : Status::OK();
  IoDone done = std::move(op->done);
  delete op;
  Reactor::Current()->DeferDone(std::move(done), std::move(st));
}

}  // namespace ubcache
