// SPDX-License-Identifier: Apache-2.0
#include "frontend/ublk_queue.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "util/log.h"
#include "util/thread.h"

namespace ubcache {

UblkQueue::UblkQueue(UblkQueueConfig config) : cfg_(config) {}

UblkQueue::~UblkQueue() { Stop(); }

Status UblkQueue::Start() {
  std::promise<Status> started;
  auto f = started.get_future();
  thread_ = std::thread([this, &started] { ThreadMain(&started); });
  Status st = f.get();
  if (!st.ok()) Stop();
  return st;
}

void UblkQueue::Stop() {
  if (reactor_ != nullptr) reactor_->Stop();
  if (thread_.joinable()) thread_.join();
  reactor_ = nullptr;  // destroyed with its thread
}

void UblkQueue::Hold() {
  if (reactor_ == nullptr) {
    quiesced_.store(true, std::memory_order_release);
    return;
  }
  reactor_->Post([this] {
    holding_ = true;
    CheckDrained();
  });
}

void UblkQueue::ThreadMain(std::promise<Status>* started) {
  SetThreadName("ub-ublkq" + std::to_string(cfg_.q_id));
  MarkServingThread(true);  // serves clients: never waits (util/thread.h)
  // Room for every tag's command plus the backend I/O it fans out into; the
  // ring submits early when the SQ fills, so this is not a hard limit.
  auto made = Reactor::Create(std::max(256u, 2u * cfg_.depth));
  if (!made.ok()) {
    started->set_value(made.status());
    return;
  }
  std::unique_ptr<Reactor> owned = std::move(made).value();
  owned->Bind();

  descs_len_ = (cfg_.depth * sizeof(ublk::IoDesc) + 4095) / 4096 * 4096;
  void* m = mmap(nullptr, descs_len_, PROT_READ, MAP_SHARED | MAP_POPULATE, cfg_.char_fd,
                 static_cast<off_t>(ublk::kCmdBufOffset + cfg_.q_id * ublk::kMaxCmdBufSize));
  if (m == MAP_FAILED) {
    started->set_value(Status::FromErrno(errno, "ublk: mmap of queue " +
                                                    std::to_string(cfg_.q_id) + " descriptors"));
    return;
  }
  descs_ = static_cast<const ublk::IoDesc*>(m);

  tags_ = std::vector<Tag>(cfg_.depth);
  for (uint16_t i = 0; i < cfg_.depth; i++) {
    Tag& t = tags_[i];
    t.queue = this;
    t.tag = i;
    t.buf = AlignedBuffer(cfg_.max_io_bytes);
  }
  reactor_ = owned.get();
  for (Tag& t : tags_) SubmitCommand(&t, ublk::kIoFetchReq, 0);
  live_tags_ = cfg_.depth;
  // The fetches must be in the kernel before START_DEV: it waits for them.
  int ret = io_uring_submit(owned->ring());
  if (ret < 0) {
    reactor_ = nullptr;
    started->set_value(Status::FromErrno(ret, "ublk: submitting FETCH_REQ"));
    munmap(m, descs_len_);
    return;
  }
  started->set_value(Status::OK());
  owned->Run();
  // The commits of the last turn are in the kernel before the ring closes.
  io_uring_submit(owned->ring());
  // Closing the ring cancels any command still pending in the driver; the
  // descriptor mapping pins /dev/ublkcN, and DEL_DEV waits for its release.
  owned.reset();
  munmap(m, descs_len_);
}

void UblkQueue::SubmitCommand(Tag* t, uint32_t op, int32_t result) {
  io_uring_sqe* sqe = reactor_->PrepareSqe(t);
  uint64_t user_data = sqe->user_data;  // packed by PrepareSqe
  std::memset(sqe, 0, sizeof *sqe);
  sqe->user_data = user_data;
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = cfg_.char_fd;
  sqe->cmd_op = op;
  auto* cmd = reinterpret_cast<ublk::IoCmd*>(sqe->cmd);
  cmd->q_id = cfg_.q_id;
  cmd->tag = t->tag;
  cmd->result = result;
  // With USER_COPY the driver refuses a buffer address: we copy ourselves.
  cmd->addr = cfg_.user_copy ? 0 : reinterpret_cast<uintptr_t>(t->buf.data());
}

void UblkQueue::OnCommand(Tag* t, int32_t res) {
  if (res == ublk::kIoResOk) {
    if (holding_) {
      // Left unanswered: the driver reissues it to the next server.
      held_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    Handle(t);
    return;
  }
  if (res != ublk::kIoResAbort) {
    UB_WARN("ublk queue {} tag {}: command failed: {}", cfg_.q_id, t->tag, std::strerror(-res));
    failed_.store(true, std::memory_order_release);
  }
  live_tags_--;
  CheckDrained();
}

namespace {

// Copies between a tag's buffer and the request's pages (USER_COPY).
Status UserCopy(int fd, void* buf, uint64_t len, uint64_t off, bool to_request) {
  ssize_t n = to_request ? pwrite(fd, buf, len, static_cast<off_t>(off))
                         : pread(fd, buf, len, static_cast<off_t>(off));
  if (n < 0) return Status::FromErrno(errno, "ublk: user copy");
  if (static_cast<uint64_t>(n) != len) return Status::IoError("ublk: short user copy");
  return Status::OK();
}

}  // namespace

void UblkQueue::Handle(Tag* t) {
  // The descriptor is written by the driver before the fetch completes and
  // stays put until we commit: copy it once.
  const ublk::IoDesc d = descs_[t->tag];
  const uint8_t op = d.op_flags & 0xff;
  const uint64_t off = d.start_sector << 9;
  const uint64_t len = uint64_t{d.nr_sectors} << 9;
  const uint64_t copy_off = ublk::UserCopyOffset(cfg_.q_id, t->tag);
  BlockDevice* dev = cfg_.device;
  backend_inflight_++;
  auto done = [this, t](Status st) { Commit(t, std::move(st), 0); };
  switch (op) {
    case ublk::kOpRead:
    case ublk::kOpWrite:
      if (len > cfg_.max_io_bytes) {
        Commit(t, Status::InvalidArgument("ublk: request larger than the I/O buffer"), 0);
        return;
      }
      if (op == ublk::kOpRead) {
        dev->Read(off, len, t->buf.data(), [this, t, len, copy_off](Status st) {
          if (st.ok() && cfg_.user_copy)
            st = UserCopy(cfg_.char_fd, t->buf.data(), len, copy_off, true);
          Commit(t, std::move(st), static_cast<int32_t>(len));
        });
      } else {
        if (cfg_.user_copy) {
          Status st = UserCopy(cfg_.char_fd, t->buf.data(), len, copy_off, false);
          if (!st.ok()) {
            Commit(t, std::move(st), 0);
            return;
          }
        }
        uint32_t flags = (d.op_flags & ublk::kIoFFua) ? uint32_t{kIoFua} : 0u;
        dev->Write(off, len, t->buf.data(), flags, [this, t, len](Status st) {
          Commit(t, std::move(st), static_cast<int32_t>(len));
        });
      }
      return;
    case ublk::kOpFlush:
      dev->Flush(done);
      return;
    case ublk::kOpDiscard:
      dev->Discard(off, len, done);
      return;
    case ublk::kOpWriteZeroes:
      dev->WriteZeroes(off, len, (d.op_flags & ublk::kIoFNoUnmap) ? uint32_t{kIoNoUnmap} : 0u,
                       done);
      return;
    default:
      Commit(t, Status::NotSupported("ublk: op " + std::to_string(op)), 0);
      return;
  }
}

void UblkQueue::Commit(Tag* t, Status st, int32_t ok_result) {
  backend_inflight_--;
  int32_t res = ok_result;
  if (!st.ok()) {
    res = -st.ToErrno();
    UB_WARN("ublk queue {} tag {}: {}", cfg_.q_id, t->tag, st.ToString());
  }
  SubmitCommand(t, ublk::kIoCommitAndFetchReq, res);
  CheckDrained();
}

void UblkQueue::CheckDrained() {
  backend_idle_.store(backend_inflight_ == 0, std::memory_order_release);
  if (holding_ && backend_inflight_ == 0) quiesced_.store(true, std::memory_order_release);
  if (live_tags_ == 0 && backend_inflight_ == 0) drained_.store(true, std::memory_order_release);
}

}  // namespace ubcache
