// SPDX-License-Identifier: Apache-2.0
#include "backend/nbd_device.h"

#include <libnbd.h>
#include <poll.h>

#include <vector>

#include "util/aligned_buffer.h"
#include "util/log.h"
#include "util/size.h"

namespace ubcache {

namespace {

Status NbdError(const std::string& spec, const char* what, int err = 0) {
  const char* msg = nbd_get_error();
  if (err == 0) err = nbd_get_errno();
  std::string text = spec + ": " + what + ": " + (msg ? msg : "unknown error");
  if (err == 0) return Status::IoError(text);
  Status st = Status::FromErrno(err, text);
  return st;
}

}  // namespace

// One libnbd connection driven by one reactor. Two poll completions (read
// and write readiness) are armed as libnbd's direction asks.
class NbdDevice::Conn {
 public:
  Conn(NbdDevice* dev, nbd_handle* h) : dev_(dev), h_(h), in_(this, POLLIN), out_(this, POLLOUT) {
    fd_ = nbd_aio_get_fd(h_);
  }
  ~Conn() { nbd_close(h_); }

  nbd_handle* handle() { return h_; }

  // Is there something to read (or an error or hangup to see) right now?
  // libnbd must be told "readable" only then. io_uring reports the mask of
  // the wakeup that completed the poll, which may be stale by the time the
  // completion runs; told "readable" in READY when the socket is not,
  // libnbd (1.14) enters REPLY.START, gets EAGAIN and stays there, waiting
  // for a reply, and a command issued after that is queued behind the
  // state machine for ever: the server has nothing to answer (a request
  // hung for good, seen with a fast nbdkit behind a slow cache device).
  bool Readable() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  // Re-arms the polls that libnbd's state machine needs now.
  void Arm() {
    unsigned dir = nbd_aio_get_direction(h_);
    if ((dir & LIBNBD_AIO_DIRECTION_READ) && !in_.armed) in_.Arm();
    if ((dir & LIBNBD_AIO_DIRECTION_WRITE) && !out_.armed) out_.Arm();
  }

 private:
  struct Poll final : IoCompletion {
    Poll(Conn* c, unsigned ev) : conn(c), events(ev) {}
    Conn* conn;
    unsigned events;
    bool armed = false;
    void Arm() {
      armed = true;
      io_uring_sqe* sqe = Reactor::Current()->PrepareSqe(this);
      io_uring_prep_poll_add(sqe, conn->fd_, events);
    }
    void Complete(int32_t res, uint32_t) override {
      armed = false;
      if (res < 0 && res != -EINTR && res != -ECANCELED) {
        UB_WARN("{}: poll: {}", conn->dev_->spec(), res);
      }
      if (res > 0) {
        if (res & (POLLIN | POLLHUP | POLLERR)) {
          if (conn->Readable()) nbd_aio_notify_read(conn->h_);
        } else if (res & POLLOUT) {
          nbd_aio_notify_write(conn->h_);
        }
      }
      conn->Arm();
    }
  };

  NbdDevice* dev_;
  nbd_handle* h_;
  int fd_;
  Poll in_;
  Poll out_;
};

namespace {

// Per-request state, freed by libnbd through the completion's free hook.
struct NbdOp {
  IoDone done;
  std::string what;
  int error = 0;
  AlignedBuffer zeros;  // write-zeroes on a server without WRITE_ZEROES
  int pending = 1;      // commands still to complete (FUA emulation adds a flush)
};

int OnComplete(void* user_data, int* error) {
  auto* op = static_cast<NbdOp*>(user_data);
  if (*error && !op->error) op->error = *error;
  if (--op->pending > 0) return 1;
  // libnbd's own lock is held here: hand the result to the reactor instead
  // of letting the caller re-enter libnbd from inside the callback.
  Status st = op->error ? Status::FromErrno(op->error, op->what) : Status::OK();
  Reactor::Current()->DeferDone(std::move(op->done), std::move(st));
  delete op;
  return 1;
}

}  // namespace

Result<nbd_handle*> NbdDevice::Connect(const std::string& spec, const std::string& uri,
                                       bool read_only) {
  nbd_handle* h = nbd_create();
  if (!h) return NbdError(spec, "nbd_create");
  // nbds:// URIs name their credentials as local files (tls-certificates,
  // tls-psk-file); the URI is the operator's, as it is for nbdinfo.
  nbd_set_uri_allow_local_file(h, true);
  if (nbd_connect_uri(h, uri.c_str()) < 0) {
    Status st = NbdError(spec, "cannot connect");
    nbd_close(h);
    return st;
  }
  if (!read_only && nbd_is_read_only(h) == 1) {
    nbd_close(h);
    return Status::Permission(spec + ": the export is read-only");
  }
  return h;
}

Result<std::unique_ptr<NbdDevice>> NbdDevice::Open(const std::string& spec, const std::string& uri,
                                                   const OpenOptions& opts) {
  UB_ASSIGN_OR_RETURN(nbd_handle * h, Connect(spec, uri, opts.read_only));
  int64_t size = nbd_get_size(h);
  if (size < 0) {
    Status st = NbdError(spec, "size");
    nbd_close(h);
    return st;
  }
  int64_t min_block = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
  uint32_t block = 512;
  if (min_block > 512 && min_block <= 65536) block = static_cast<uint32_t>(min_block);
  Caps caps{nbd_can_flush(h) == 1, nbd_can_fua(h) == 1, nbd_can_trim(h) == 1,
            nbd_can_zero(h) == 1, nbd_can_multi_conn(h) == 1};
  if (!caps.multi_conn)
    UB_WARN("{}: server does not advertise multi-conn; a flush covers only writes on its own "
            "connection (use one reactor thread for strict ordering)",
            spec);
  uint64_t usable = static_cast<uint64_t>(size) - static_cast<uint64_t>(size) % block;
  return std::unique_ptr<NbdDevice>(
      new NbdDevice(spec, uri, usable, block, opts.read_only, caps, h));
}

NbdDevice::NbdDevice(std::string spec, std::string uri, uint64_t size, uint32_t block_size,
                     bool read_only, Caps caps, nbd_handle* first)
    : BlockDevice(std::move(spec), size, block_size, read_only),
      uri_(std::move(uri)),
      caps_(caps),
      spare_(first) {}

NbdDevice::~NbdDevice() {
  MutexLock l(&spare_mu_);
  if (spare_) nbd_close(spare_);
}

std::string NbdDevice::Describe() const {
  return spec_ + " (NBD export, " + FormatSize(size()) + (caps_.multi_conn ? ", multi-conn" : "") +
         ")";
}

Result<NbdDevice::Conn*> NbdDevice::GetConn() {
  unsigned id = Reactor::Current()->id();
  if (conns_[id]) return conns_[id].get();
  nbd_handle* h = nullptr;
  {
    MutexLock l(&spare_mu_);
    h = spare_;
    spare_ = nullptr;
  }
  if (!h) {
    // First request on this reactor: connect now (blocks this thread once).
    UB_ASSIGN_OR_RETURN(h, Connect(spec_, uri_, read_only_));
  }
  conns_[id] = std::make_unique<Conn>(this, h);
  return conns_[id].get();
}

void NbdDevice::DoSubmit(const IoRequest& req, IoDone done) {
  if ((req.op == IoOp::kRead || req.op == IoOp::kWrite) && req.len > kMaxRequest) {
    CompleteLater(std::move(done),
                  Status::InvalidArgument(spec_ + ": request of " + FormatSize(req.len) +
                                          " exceeds " + FormatSize(kMaxRequest)));
    return;
  }
  auto conn = GetConn();
  if (!conn.ok()) {
    CompleteLater(std::move(done), conn.status());
    return;
  }
  nbd_handle* h = (*conn)->handle();
  auto* op = new NbdOp();
  op->done = std::move(done);
  op->what = spec_ + ": " + IoOpName(req.op) + " at " + std::to_string(req.offset);
  // OnComplete runs once per command issued; the last one deletes the op.
  auto cb = [op] {
    return nbd_completion_callback{.callback = OnComplete, .user_data = op, .free = nullptr};
  };
  uint32_t fua = 0;
  bool emulate_fua = false;
  if (req.flags & kIoFua) {
    if (caps_.fua)
      fua = LIBNBD_CMD_FLAG_FUA;
    else
      emulate_fua = caps_.flush;
  }
  // Both commands are counted before either is issued, so the first
  // completion cannot see pending reach zero early.
  if (emulate_fua) op->pending = 2;
  int64_t cookie = 0;
  switch (req.op) {
    case IoOp::kRead:
      cookie = nbd_aio_pread(h, req.buf, req.len, req.offset, cb(), 0);
      break;
    case IoOp::kWrite:
      cookie = nbd_aio_pwrite(h, req.buf, req.len, req.offset, cb(), fua);
      break;
    case IoOp::kFlush:
      if (!caps_.flush) {
        // The server keeps no volatile cache it would let us flush.
        CompleteLater(std::move(op->done), Status::OK());
        delete op;
        return;
      }
      cookie = nbd_aio_flush(h, cb(), 0);
      break;
    case IoOp::kDiscard:
    case IoOp::kWriteZeroes:
      if (caps_.zero) {
        uint32_t f = fua | ((req.op == IoOp::kWriteZeroes && (req.flags & kIoNoUnmap))
                                ? LIBNBD_CMD_FLAG_NO_HOLE
                                : 0);
        cookie = nbd_aio_zero(h, req.len, req.offset, cb(), f);
      } else if (req.len <= kMaxRequest) {
        op->zeros = AlignedBuffer(req.len);
        op->zeros.Zero();
        cookie = nbd_aio_pwrite(h, op->zeros.data(), req.len, req.offset, cb(), fua);
      } else {
        CompleteLater(std::move(op->done),
                      Status::NotSupported(spec_ + ": server cannot zero, range too large"));
        delete op;
        return;
      }
      break;
  }
  if (cookie < 0) {
    Status st = NbdError(spec_, IoOpName(req.op));
    IoDone d = std::move(op->done);
    delete op;
    CompleteLater(std::move(d), std::move(st));
    return;
  }
  if (emulate_fua && nbd_aio_flush(h, cb(), 0) < 0) {
    // The write is in flight and will complete the op; record the error.
    op->error = EIO;
    op->pending--;
  }
  (*conn)->Arm();
}

}  // namespace ubcache
