// SPDX-License-Identifier: Apache-2.0
#include "frontend/ublk_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <thread>

#include "util/clock.h"
#include "util/log.h"
#include "util/size.h"

namespace ubcache {

namespace {

uint8_t Log2(uint64_t v) {
  uint8_t s = 0;
  while ((uint64_t{2} << s) <= v) s++;
  return s;
}

void SleepMs(unsigned ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Limits for one DISCARD / WRITE_ZEROES request; the cache splits them as
// it must, so these only bound how long one request may take.
constexpr uint32_t kMaxDiscardSectors = (1u << 30) >> 9;

}  // namespace

ublk::Params UblkParamsFor(const UblkExport& e, uint32_t max_io_bytes) {
  const BlockDevice& dev = *e.device;
  bool ro = e.read_only || dev.read_only();
  ublk::Params p{};
  p.len = sizeof p;
  p.types = ublk::kParamBasic;
  uint8_t lbs = Log2(dev.logical_block_size());
  p.basic.logical_bs_shift = lbs;
  p.basic.physical_bs_shift = std::max<uint8_t>(lbs, 12);
  p.basic.io_min_shift = p.basic.physical_bs_shift;
  p.basic.io_opt_shift = e.io_opt ? Log2(e.io_opt) : 0;
  p.basic.max_sectors = max_io_bytes >> 9;
  p.basic.dev_sectors = dev.size() >> 9;
  // A volatile write cache with FUA: the kernel sends FLUSH and FUA writes
  // to us instead of assuming every completed write is durable, and the
  // cache (or the backing device) makes them durable as the NBD path does.
  p.basic.attrs = ublk::kAttrVolatileCache | ublk::kAttrFua | (ro ? ublk::kAttrReadOnly : 0);
  if (!ro) {
    p.types |= ublk::kParamDiscard;
    p.discard.discard_granularity = dev.logical_block_size();
    p.discard.max_discard_sectors = kMaxDiscardSectors;
    p.discard.max_write_zeroes_sectors = kMaxDiscardSectors;
    p.discard.max_discard_segments = 1;
  }
  return p;
}

UblkServer::UblkServer(std::vector<UblkExport> exports, UblkServerOptions options)
    : options_(options) {
  for (UblkExport& e : exports) {
    Dev d;
    d.exp = std::move(e);
    devs_.push_back(std::move(d));
  }
}

UblkServer::~UblkServer() {
  [[maybe_unused]] Status st = Stop();
  if (signal_fd_ >= 0) close(signal_fd_);
}

std::string UblkServer::BlockPath(uint32_t id) { return "/dev/ublkb" + std::to_string(id); }

bool UblkServer::SecondSignal() {
  if (abandoned_) return true;
  pollfd p{signal_fd_, POLLIN, 0};
  if (signal_fd_ < 0 || poll(&p, 1, 0) <= 0) return false;
  signalfd_siginfo si;
  [[maybe_unused]] ssize_t r = read(signal_fd_, &si, sizeof si);
  UB_WARN("ublk: {} while starting or stopping: giving up waiting", strsignal(static_cast<int>(si.ssi_signo)));
  abandoned_ = true;
  return true;
}

Status UblkServer::Start() {
  if (devs_.empty()) return Status::InvalidArgument("ublk: nothing to serve");
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC);
  if (signal_fd_ < 0) return Status::FromErrno(errno, "signalfd");

  UB_ASSIGN_OR_RETURN(ctrl_, UblkControl::Open());
  // START_DEV and END_USER_RECOVERY wait for every tag's fetch: give up on a
  // signal, or when a queue's fetch was refused.
  ctrl_->set_interrupt([this] {
    for (const Dev& d : devs_)
      for (const auto& q : d.queues)
        if (q->failed()) return true;
    return SecondSignal();
  });
  UB_ASSIGN_OR_RETURN(uint64_t features, ctrl_->GetFeatures());
  uint64_t required = ublk::kFCmdIoctlEncode | (options_.recover ? ublk::kFUserRecovery : 0);
  if ((features & required) != required)
    return Status::NotSupported("ublk: the kernel's ublk_drv lacks " +
                                UblkFeatureNames(required & ~features) + " (it offers " +
                                UblkFeatureNames(features) + ")");
  UB_INFO("ublk: driver features {:#x} ({})", features, UblkFeatureNames(features));
  features_ = features;

  if (options_.recover_auto && options_.first_id < 0)
    return Status::InvalidArgument("ublk: automatic recovery needs the device ids to look for");
  Status st;
  for (size_t i = 0; i < devs_.size() && st.ok(); i++) {
    Dev& d = devs_[i];
    d.id = options_.first_id < 0 ? ~0u : static_cast<uint32_t>(options_.first_id) + static_cast<uint32_t>(i);
    bool recover = options_.recover;
    if (options_.recover_auto) {
      auto info = ctrl_->GetDevInfo(d.id);
      if (!info.ok() && info.status().code() != Status::Code::kNotFound) {
        st = info.status();
        break;
      }
      recover = info.ok();
    }
    st = recover ? RecoverOne(d, features) : StartOne(d, features);
  }
  if (!st.ok()) {
    [[maybe_unused]] Status ignored = Stop();
    return st;
  }
  return Status::OK();
}

Status UblkServer::OpenCharDev(Dev& d) {
  std::string path = "/dev/ublkc" + std::to_string(d.id);
  uint64_t deadline = NowNanos() + 5'000'000'000ull;
  while (true) {
    d.char_fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (d.char_fd >= 0) return Status::OK();
    int e = errno;
    // The node may appear a moment after ADD_DEV; a killed server's
    // descriptor may still be closing.
    if ((e != ENOENT && e != EBUSY) || NowNanos() > deadline || SecondSignal())
      return Status::FromErrno(e, "ublk: " + path);
    SleepMs(20);
  }
}

Status UblkServer::StartQueues(Dev& d, unsigned nr_queues, unsigned depth, uint32_t max_io,
                               bool user_copy) {
  for (unsigned q = 0; q < nr_queues; q++) {
    UblkQueueConfig c;
    c.device = d.exp.device;
    c.char_fd = d.char_fd;
    c.q_id = static_cast<uint16_t>(q);
    c.depth = static_cast<uint16_t>(depth);
    c.max_io_bytes = max_io;
    c.user_copy = user_copy;
    d.queues.push_back(std::make_unique<UblkQueue>(c));
    UB_RETURN_IF_ERROR(d.queues.back()->Start());
  }
  return Status::OK();
}

Status UblkServer::StartOne(Dev& d, uint64_t features) {
  unsigned queues = options_.queues ? options_.queues : std::max(1u, std::thread::hardware_concurrency());
  ublk::DevInfo info{};
  info.nr_hw_queues = static_cast<uint16_t>(std::min(queues, 4096u));
  info.queue_depth = static_cast<uint16_t>(std::min(options_.depth, ublk::kMaxQueueDepth));
  info.max_io_buf_bytes = options_.max_io_bytes;
  info.dev_id = d.id;
  // USER_COPY when offered (we copy only what a request needs, when it is
  // handled); recovery (+ reissue) when offered, so a killed server's device
  // survives for `--recover`.
  info.flags = ublk::kFCmdIoctlEncode | (features & (ublk::kFUserCopy | ublk::kFUserRecovery |
                                                    ublk::kFUserRecoveryReissue | ublk::kFUpdateSize));
  UB_RETURN_IF_ERROR(ctrl_->AddDev(&info));
  d.id = info.dev_id;
  d.flags = info.flags;
  d.added = true;
  ublk::Params params = UblkParamsFor(d.exp, info.max_io_buf_bytes);
  UB_RETURN_IF_ERROR(ctrl_->SetParams(d.id, params));
  d.bytes = params.basic.dev_sectors << 9;
  UB_RETURN_IF_ERROR(OpenCharDev(d));
  bool user_copy = info.flags & ublk::kFUserCopy;
  UB_RETURN_IF_ERROR(StartQueues(d, info.nr_hw_queues, info.queue_depth, info.max_io_buf_bytes, user_copy));
  UB_RETURN_IF_ERROR(ctrl_->StartDev(d.id));
  d.started = true;
  UB_INFO("{}: serving export '{}' ({}, {}{}), {} queue{} x depth {}, {}{}", BlockPath(d.id),
          d.exp.name, FormatSize(d.exp.device->size()), d.exp.device->Describe(),
          d.exp.read_only ? ", read-only" : "", info.nr_hw_queues, info.nr_hw_queues == 1 ? "" : "s",
          info.queue_depth, user_copy ? "user copy" : "buffer copy",
          (info.flags & ublk::kFUserRecovery) ? ", recoverable" : "");
  return Status::OK();
}

Status UblkServer::RecoverOne(Dev& d, uint64_t features) {
  std::string name = "device " + std::to_string(d.id);
  UB_ASSIGN_OR_RETURN(ublk::DevInfo info, ctrl_->GetDevInfo(d.id));
  if (info.state == ublk::kStateDead) {
    // Stopped (a server's STOP_DEV, abandoned by a second signal): its block
    // device is gone with nothing in flight, so there is nothing to reattach;
    // the id is deleted and added anew.
    UB_WARN("ublk {} was stopped, not killed: deleting it and adding it anew", name);
    UB_RETURN_IF_ERROR(ctrl_->DelDev(d.id));
    return StartOne(d, features);
  }
  if (!(info.flags & ublk::kFUserRecovery))
    return Status::InvalidArgument("ublk: " + name + " was created without user recovery");
  d.flags = info.flags;
  UB_ASSIGN_OR_RETURN(ublk::Params params, ctrl_->GetParams(d.id));
  // Smaller is a device whose export grew (UpdateSize's kernel lacked
  // UPDATE_SIZE, or the backing device grew while no server ran): its
  // requests all fall inside the export, so it is served, and grown below
  // when the kernel can. Larger would expose bytes the export lacks.
  if (params.basic.dev_sectors > d.exp.device->size() >> 9)
    return Status::InvalidArgument("ublk: " + name + " has " + FormatSize(params.basic.dev_sectors << 9) +
                                   ", export '" + d.exp.name + "' has " +
                                   FormatSize(d.exp.device->size()));
  d.bytes = params.basic.dev_sectors << 9;
  if (info.state == ublk::kStateLive && info.ublksrv_pid > 0 && kill(info.ublksrv_pid, 0) == 0)
    return Status::Busy("ublk: " + name + " is served by process " + std::to_string(info.ublksrv_pid));
  // The driver quiesces the device some time after its server died; until
  // then START_USER_RECOVERY says EBUSY.
  uint64_t deadline = NowNanos() + 30'000'000'000ull;
  bool noted = false;
  while (true) {
    Status st = ctrl_->StartUserRecovery(d.id);
    if (st.ok()) break;
    if (st.code() != Status::Code::kBusy) return st;
    if (NowNanos() > deadline) {
      auto now = ctrl_->GetDevInfo(d.id);
      return Status::Busy("ublk: " + name + " did not become recoverable in 30 s (state " +
                          (now.ok() ? std::to_string(now->state) : now.status().message()) + ")");
    }
    if (SecondSignal()) return Status::Shutdown("ublk: interrupted");
    if (!noted) UB_INFO("ublk {}: waiting for the driver to quiesce it", name);
    noted = true;
    SleepMs(100);
  }
  UB_RETURN_IF_ERROR(OpenCharDev(d));
  bool user_copy = info.flags & ublk::kFUserCopy;
  UB_RETURN_IF_ERROR(StartQueues(d, info.nr_hw_queues, info.queue_depth, info.max_io_buf_bytes, user_copy));
  UB_RETURN_IF_ERROR(ctrl_->EndUserRecovery(d.id));
  d.added = d.started = true;
  if (d.bytes < d.exp.device->size()) {
    MutexLock l(&ctrl_mu_);
    Status st = UpdateSizeLocked(d);
    if (!st.ok()) UB_WARN("{}", st.message());
  }
  UB_INFO("{}: reattached, serving export '{}' ({}, {}), {} queue{} x depth {}, {}",
          BlockPath(d.id), d.exp.name, FormatSize(d.exp.device->size()),
          d.exp.device->Describe(), info.nr_hw_queues, info.nr_hw_queues == 1 ? "" : "s",
          info.queue_depth, user_copy ? "user copy" : "buffer copy");
  return Status::OK();
}

void UblkServer::WaitForSignal() {
  pollfd p{signal_fd_, POLLIN, 0};
  while (poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
  signalfd_siginfo si;
  [[maybe_unused]] ssize_t r = read(signal_fd_, &si, sizeof si);
  UB_INFO("{}: stopping", strsignal(static_cast<int>(si.ssi_signo)));
}

bool UblkServer::WaitDrained(Dev& d) {
  // STOP_DEV has drained the block queue and aborted our fetches; the abort
  // completions may still be on their way. Past a grace period a queue with
  // no backend I/O in flight counts as drained: closing its ring cancels
  // whatever command is left.
  uint64_t grace = NowNanos() + 5'000'000'000ull;
  while (true) {
    bool all = true, idle = true;
    for (auto& q : d.queues) {
      all &= q->drained();
      idle &= q->backend_idle();
    }
    if (all || (idle && NowNanos() > grace)) return true;
    if (SecondSignal()) return false;
    SleepMs(5);
  }
}

Status UblkServer::FlushExport(Dev& d) {
  if (d.exp.read_only || d.exp.device->read_only() || d.queues.empty()) return Status::OK();
  auto p = std::make_shared<std::promise<Status>>();
  auto f = p->get_future();
  BlockDevice* dev = d.exp.device;
  d.queues[0]->reactor()->Post([dev, p] { dev->Flush([p](Status st) { p->set_value(std::move(st)); }); });
  while (f.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (SecondSignal()) return Status::Shutdown("ublk: flush of export '" + d.exp.name + "' abandoned");
  }
  return f.get();
}

void UblkServer::ReleaseQueues(Dev& d) {
  d.queues.clear();  // each queue stops its thread, closes its ring, unmaps
  if (d.char_fd >= 0) close(d.char_fd);
  d.char_fd = -1;
}

Status UblkServer::UpdateSize(size_t index) {
  MutexLock l(&ctrl_mu_);
  if (stopping_ || ctrl_ == nullptr || index >= devs_.size() || !devs_[index].started)
    return Status::Shutdown("ublk: the device is stopping");
  return UpdateSizeLocked(devs_[index]);
}

Result<std::optional<uint64_t>> UblkGrowth(uint64_t features, uint64_t device_bytes, uint64_t export_bytes,
                                           const std::string& path, const std::string& export_name) {
  const uint64_t want = export_bytes >> 9 << 9;  // the kernel counts sectors
  if (want == device_bytes) return std::optional<uint64_t>();
  if (want < device_bytes)
    return Status::InvalidArgument("ublk: " + path + " would shrink from " + FormatSize(device_bytes) + " to " +
                                   FormatSize(want));
  if (!(features & ublk::kFUpdateSize))
    return Status::NotSupported("ublk: " + path + " stays at " + FormatSize(device_bytes) +
                                ": this kernel's ublk driver lacks UBLK_F_UPDATE_SIZE (UBLK_U_CMD_UPDATE_SIZE, "
                                "Linux 6.16); export '" + export_name + "' has grown to " + FormatSize(want) +
                                " for NBD clients; the ublk device takes it when it is deleted and added again");
  return std::optional<uint64_t>(want);
}

Status UblkServer::UpdateSizeLocked(Dev& d) {
  UB_ASSIGN_OR_RETURN(std::optional<uint64_t> grow,
                      UblkGrowth(features_, d.bytes, d.exp.device->size(), BlockPath(d.id), d.exp.name));
  if (!grow) return Status::OK();
  const uint64_t want = *grow;
  UB_RETURN_IF_ERROR(ctrl_->UpdateSize(d.id, want));
  UB_INFO("{}: grown from {} to {}", BlockPath(d.id), FormatSize(d.bytes), FormatSize(want));
  d.bytes = want;
  return Status::OK();
}

Status UblkServer::Stop() {
  {
    MutexLock l(&ctrl_mu_);  // no UpdateSize from here on
    stopping_ = true;
  }
  if (ctrl_ == nullptr) return Status::OK();
  ctrl_->set_interrupt([this] { return SecondSignal(); });
  Status result;
  auto note = [&result](Status st) {
    if (!st.ok()) {
      UB_ERROR("{}", st.message());
      if (result.ok()) result = std::move(st);
    }
  };
  for (Dev& d : devs_)
    if (d.started && !abandoned_) note(ctrl_->StopDev(d.id));
  for (Dev& d : devs_) {
    if (!d.started || abandoned_) continue;
    if (WaitDrained(d)) note(FlushExport(d));
  }
  for (Dev& d : devs_) ReleaseQueues(d);
  for (Dev& d : devs_) {
    if (d.added && !abandoned_) note(ctrl_->DelDev(d.id));
    else if (d.added) UB_WARN("ublk: device {} is left behind; `ubcache serve ... --recover {}` reattaches it", d.id, d.id);
    d.added = d.started = false;
  }
  ctrl_.reset();
  if (result.ok() && !abandoned_) UB_INFO("ublk: devices stopped and deleted");
  if (abandoned_ && result.ok()) result = Status::Shutdown("ublk: stop abandoned after a second signal");
  return result;
}

Status UblkServer::HandOff() {
  {
    MutexLock l(&ctrl_mu_);  // no UpdateSize from here on
    stopping_ = true;
  }
  if (ctrl_ == nullptr) return Status::OK();
  for (const Dev& d : devs_) {
    if (d.started && !(d.flags & ublk::kFUserRecoveryReissue)) {
      UB_WARN("ublk: device {} cannot hold its I/O for the next server (no user_recovery_reissue): "
              "stopping and deleting the devices", d.id);
      return Stop();
    }
  }
  ctrl_->set_interrupt([this] { return SecondSignal(); });
  Status result;
  for (Dev& d : devs_)
    for (auto& q : d.queues) q->Hold();
  // The requests in flight end in the backend; nothing new reaches it.
  for (Dev& d : devs_) {
    bool quiet = false;
    while (!quiet && !SecondSignal()) {
      quiet = std::all_of(d.queues.begin(), d.queues.end(), [](const auto& q) { return q->quiesced(); });
      if (!quiet) SleepMs(2);
    }
    if (!quiet) continue;
    Status st = FlushExport(d);
    if (!st.ok() && result.ok()) result = st;
  }
  for (Dev& d : devs_) {
    unsigned held = 0;
    for (const auto& q : d.queues) held += q->held();
    // The queue threads, their rings and /dev/ublkcN stay as they are until
    // the process exits: the driver then sees its server gone exactly as
    // after a kill -9, the path its user recovery is made for, and hands
    // the held requests back for reissue. (Closing the rings one by one
    // while the process lives is not that path: on Linux 6.12 a held
    // request then failed with an I/O error.) The queues are leaked on
    // purpose: their threads must not be joined, and end with the process.
    for (auto& q : d.queues) (void)q.release();
    d.queues.clear();
    d.char_fd = -1;
    if (d.added)
      UB_INFO("{}: left in place with its I/O held ({} request{} waiting) for the next server's "
              "--recover", BlockPath(d.id), held, held == 1 ? "" : "s");
    d.added = d.started = false;
  }
  ctrl_.reset();
  if (abandoned_ && result.ok()) result = Status::Shutdown("ublk: hand-off abandoned after a second signal");
  return result;
}

}  // namespace ubcache
