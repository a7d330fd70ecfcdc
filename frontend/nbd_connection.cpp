// SPDX-License-Identifier: Apache-2.0
#include "frontend/nbd_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "util/buffer_pool.h"
#include "util/endian.h"
#include "util/log.h"

namespace ubcache {

namespace {

constexpr size_t kRecvBufferSize = 256 << 10;
// Requests executing or waiting to be sent, and the bytes of their
// buffers, before we stop reading more: a client cannot make the server
// buffer without bound. The request that crosses the byte limit is still
// taken, so a connection holds at most kNbdMaxLiveBytes + one payload
// (nbd::kMaxPayload) + the receive buffer — the per-connection bound
// `serve --help` states.
constexpr uint32_t kMaxLiveOps = 512;
constexpr size_t kMaxIovPerSend = 512;
// A WRITE payload at least this large that has not all arrived is received
// straight into its own buffer; smaller ones keep flowing through the
// receive buffer, so one recv can carry a payload and the requests after it.
constexpr uint32_t kDirectPayload = 64 << 10;

uint32_t ToNbdError(const Status& st) {
  switch (st.ToErrno()) {
    case EPERM: return nbd::kEPERM;
    case EINVAL: return nbd::kEINVAL;
    case ENOSPC: return nbd::kENOSPC;
    case EOVERFLOW: return nbd::kEOVERFLOW;
    case EOPNOTSUPP: return nbd::kENOTSUP;
    case ESHUTDOWN: return nbd::kESHUTDOWN;
    case ENOMEM: return nbd::kENOMEM;
    default: return nbd::kEIO;
  }
}

}  // namespace

struct NbdConnection::Op {
  nbd::Request req;
  uint32_t error = 0;
  uint8_t* buf = nullptr;  // WRITE payload or READ data
  size_t cap = 0;
  uint8_t hdr[32];
  uint32_t hdr_len = 0;
  uint32_t data_len = 0;  // bytes of buf sent after hdr
  std::string raw;        // handshake bytes, sent instead of hdr
  bool clear = false;     // queued before TLS started: sent unencrypted
  size_t encrypted = 0;   // under TLS: bytes of hdr (or raw) + data done
};

std::vector<NbdConnection*>& NbdConnection::OnThisThread() {
  thread_local std::vector<NbdConnection*> list;
  return list;
}

NbdConnection::NbdConnection(NbdServer* server, int fd, std::string peer)
    : server_(server),
      fd_(fd),
      peer_(std::move(peer)),
      reactor_(Reactor::Current()),
      infos_(server->export_infos()),
      handshake_(&infos_, server->tls_policy()),
      rbuf_(kRecvBufferSize) {
  recv_c_.conn = this;
  send_c_.conn = this;
  OnThisThread().push_back(this);
}

NbdConnection::~NbdConnection() {
  auto& list = OnThisThread();
  list.erase(std::remove(list.begin(), list.end(), this), list.end());
  close(fd_);
}

void NbdConnection::Start() {
  UB_DEBUG("nbd: {} connected", peer_);
  std::string greeting;
  nbd::Handshake::Greeting(&greeting);
  QueueRaw(std::move(greeting));
  ArmRecv();
}

void NbdConnection::BeginShutdown() { StopReading("server shutting down"); }

void NbdConnection::ArmRecv() {
  // The limits stop new requests only: a payload (or a refused one being
  // skipped) already under way must arrive, or its op would never finish.
  if (!reading_ || recv_inflight_ || (phase_ == Phase::kHeader && Full())) return;
  io_uring_sqe* sqe = reactor_->PrepareSqe(&recv_c_);
  if (tls_) {
    io_uring_prep_recv(sqe, fd_, crbuf_.data(), crbuf_.size(), 0);
  } else if (phase_ == Phase::kPayload && payload_direct_) {
    // The rest of a large WRITE's payload goes straight into its buffer, in
    // one completion (MSG_WAITALL: io_uring retries short receives itself).
    io_uring_prep_recv(sqe, fd_, payload_op_->buf + payload_got_,
                       payload_op_->req.length - payload_got_, MSG_WAITALL);
  } else {
    if (rend_ == rbuf_.size()) {
      std::memmove(rbuf_.data(), rbuf_.data() + rstart_, rend_ - rstart_);
      rend_ -= rstart_;
      rstart_ = 0;
    }
    io_uring_prep_recv(sqe, fd_, rbuf_.data() + rend_, rbuf_.size() - rend_, 0);
  }
  recv_inflight_ = true;
}

void NbdConnection::OnRecv(int32_t res) {
  recv_inflight_ = false;
  if (res == -EINTR || res == -EAGAIN) {
    ArmRecv();
    return;
  }
  if (res <= 0) {
    if (res < 0 && res != -ECANCELED && res != -ECONNRESET)
      UB_DEBUG("nbd: {}: recv: {}", peer_, std::strerror(-res));
    StopReading(res == 0 ? "client closed the connection" : "receive error");
    return;
  }
  if (!reading_) {
    MaybeClose();
    return;
  }
  if (tls_) {
    OnTlsRecv(static_cast<size_t>(res));
    ArmRecv();
    return;
  }
  if (phase_ == Phase::kPayload && payload_direct_) {
    payload_got_ += static_cast<uint32_t>(res);
    if (payload_got_ == payload_op_->req.length) {
      Op* op = payload_op_;
      payload_op_ = nullptr;
      phase_ = Phase::kHeader;
      Execute(op);
    }
  } else {
    rend_ += static_cast<size_t>(res);
  }
  Process();
  ArmRecv();
}

void NbdConnection::Process() {
  for (;;) {
    size_t before = rend_ - rstart_;
    if (tls_ && !PullPlaintext()) return;
    bool pulled = rend_ - rstart_ > before;
    if (phase_ == Phase::kHandshake && !ProcessHandshake()) return;
    ProcessRequests();
    if (rstart_ == rend_) rstart_ = rend_ = 0;
    if (tls_eof_) {
      StopReading("client closed the TLS session");
      return;
    }
    // Under TLS the session may hold more plaintext than rbuf_ took.
    if (!tls_ || !pulled || !reading_) return;
  }
}

void NbdConnection::StartTls() {
  auto session = TlsSession::Create(server_->tls_credentials());
  if (!session.ok()) {
    UB_WARN("nbd: {}: cannot start TLS: {}", peer_, session.status().ToString());
    StopReading("TLS setup failed");
    return;
  }
  tls_ = std::move(*session);
  crbuf_.resize(kNbdTlsRecvBytes);
  // Whatever followed STARTTLS is the client's first TLS bytes.
  size_t early = rend_ - rstart_;
  tls_->FeedCiphertext(rbuf_.data() + rstart_, early);
  rstart_ = rend_ = 0;
  if (early > 0) OnTlsRecv(0);
}

void NbdConnection::OnTlsRecv(size_t len) {
  if (len > 0) tls_->FeedCiphertext(crbuf_.data(), len);
  if (!tls_->handshake_done()) {
    auto step = tls_->Handshake();
    ScheduleSend();  // handshake records, or the alert that refuses the peer
    if (!step.ok()) {
      UB_WARN("nbd: {}: TLS refused: {}", peer_, step.status().message());
      StopReading("TLS refused");
      return;
    }
    if (*step == TlsSession::Step::kAgain) return;
    std::string who = tls_->peer();
    UB_DEBUG("nbd: {}: TLS established{}{}: {}", peer_, who.empty() ? "" : " with ", who, tls_->description());
    handshake_.TlsStarted();
  }
  Process();
}

bool NbdConnection::PullPlaintext() {
  if (!tls_->handshake_done()) return false;
  for (;;) {
    if (rend_ == rbuf_.size() && rstart_ > 0) {
      std::memmove(rbuf_.data(), rbuf_.data() + rstart_, rend_ - rstart_);
      rend_ -= rstart_;
      rstart_ = 0;
    }
    if (rend_ == rbuf_.size()) return true;  // the rest waits in the session
    bool eof = false;
    auto n = tls_->Read(rbuf_.data() + rend_, rbuf_.size() - rend_, &eof);
    if (!n.ok()) {
      UB_WARN("nbd: {}: {}; closing the connection", peer_, n.status().message());
      StopReading("TLS error");
      return false;
    }
    if (*n == 0) {
      tls_eof_ = eof;  // Process() parses what came before, then stops
      return true;
    }
    rend_ += *n;
  }
}

bool NbdConnection::ProcessHandshake() {
  for (size_t i = 0; i < infos_.size(); i++) infos_[i].size = server_->exports()[i].device->size();
  size_t consumed = 0;
  std::string out;
  auto st = handshake_.Feed(rbuf_.data() + rstart_, rend_ - rstart_, &consumed, &out);
  rstart_ += consumed;
  if (!out.empty()) QueueRaw(std::move(out));
  switch (st) {
    case nbd::Handshake::State::kNeedMore:
      return false;
    case nbd::Handshake::State::kClose:
      UB_DEBUG("nbd: {}: handshake ended: {}", peer_, handshake_.close_reason());
      StopReading("handshake ended");
      return false;
    case nbd::Handshake::State::kStartTls:
      StartTls();  // the ACK in `out` is queued in clear, ahead of TLS
      return false;
    case nbd::Handshake::State::kDone:
      break;
  }
  const NbdExport& e = server_->exports()[handshake_.export_index()];
  const nbd::ExportInfo& info = infos_[handshake_.export_index()];
  dev_ = e.device;
  limits_ = nbd::ExportLimits{info.size, info.min_block,
                              (info.flags & nbd::kFlagReadOnly) != 0,
                              handshake_.structured_replies(), handshake_.base_allocation()};
  phase_ = Phase::kHeader;
  UB_DEBUG("nbd: {}: serving export '{}'{}", peer_, info.name,
           limits_.structured_replies ? " with structured replies" : "");
  return true;
}

bool NbdConnection::ProcessRequests() {
  while (reading_) {
    size_t avail = rend_ - rstart_;
    if (phase_ == Phase::kPayload) {
      if (payload_direct_) return false;  // arriving straight into its buffer
      // A small payload arriving through the receive buffer.
      uint32_t n = static_cast<uint32_t>(std::min<size_t>(avail, payload_op_->req.length - payload_got_));
      std::memcpy(payload_op_->buf + payload_got_, rbuf_.data() + rstart_, n);
      rstart_ += n;
      payload_got_ += n;
      if (payload_got_ < payload_op_->req.length) return false;
      Op* op = payload_op_;
      payload_op_ = nullptr;
      phase_ = Phase::kHeader;
      Execute(op);
      continue;
    }
    if (phase_ == Phase::kDiscard) {
      uint64_t n = std::min<uint64_t>(avail, discard_left_);
      rstart_ += n;
      discard_left_ -= n;
      if (discard_left_ > 0) return false;
      phase_ = Phase::kHeader;
      continue;
    }
    if (phase_ != Phase::kHeader || avail < nbd::kRequestHeaderSize || Full()) return false;
    nbd::Request req;
    if (!nbd::DecodeRequest(rbuf_.data() + rstart_, &req)) {
      UB_WARN("nbd: {}: bad request magic; closing the connection", peer_);
      StopReading("bad request magic");
      return false;
    }
    rstart_ += nbd::kRequestHeaderSize;
    StartRequest(req);
  }
  return false;
}

void NbdConnection::StartRequest(const nbd::Request& req) {
  if (req.type == nbd::kCmdDisc) {
    StopReading("client sent DISC");
    return;
  }
  Op* op = new Op();
  op->req = req;
  ops_live_++;
  uint32_t err = nbd::ValidateRequest(req, limits_);
  if (nbd::HasPayload(req)) {
    if (err) {
      UB_DEBUG("nbd: {}: refusing {} at {}+{}: error {}", peer_, nbd::CmdName(req.type), req.offset,
               req.length, err);
      FinishError(op, err);
      if (req.length > nbd::kMaxDiscardedPayload) {
        // Too much to skip politely; the protocol allows a hard disconnect.
        StopReading("oversized write payload");
        return;
      }
      discard_left_ = req.length;
      phase_ = Phase::kDiscard;
      return;
    }
    op->buf = BufferPool::ForThread().Get(req.length, &op->cap);
    live_bytes_ += op->cap;
    size_t n = std::min<size_t>(rend_ - rstart_, req.length);
    std::memcpy(op->buf, rbuf_.data() + rstart_, n);
    rstart_ += n;
    if (n < req.length) {
      payload_op_ = op;
      payload_got_ = static_cast<uint32_t>(n);
      payload_direct_ = !tls_ && req.length - n >= kDirectPayload;
      phase_ = Phase::kPayload;
      return;
    }
    Execute(op);
    return;
  }
  if (err) {
    UB_DEBUG("nbd: {}: refusing {} at {}+{}: error {}", peer_, nbd::CmdName(req.type), req.offset,
             req.length, err);
    FinishError(op, err);
    return;
  }
  Execute(op);
}

void NbdConnection::Execute(Op* op) {
  const nbd::Request& r = op->req;
  auto done = [this, op](Status st) { Finish(op, std::move(st)); };
  // TRIM and WRITE_ZEROES with FUA: the device call, then a flush.
  auto done_fua = [this, op](Status st) {
    if (!st.ok() || !(op->req.flags & nbd::kCmdFlagFua)) {
      Finish(op, std::move(st));
      return;
    }
    dev_->Flush([this, op](Status st2) { Finish(op, std::move(st2)); });
  };
  switch (r.type) {
    case nbd::kCmdRead:
      op->buf = BufferPool::ForThread().Get(r.length, &op->cap);
      live_bytes_ += op->cap;
      dev_->Read(r.offset, r.length, op->buf, done);
      break;
    case nbd::kCmdWrite:
      dev_->Write(r.offset, r.length, op->buf, (r.flags & nbd::kCmdFlagFua) ? uint32_t{kIoFua} : 0u, done);
      break;
    case nbd::kCmdFlush:
      dev_->Flush(done);
      break;
    case nbd::kCmdTrim:
      dev_->Discard(r.offset, r.length, done_fua);
      break;
    case nbd::kCmdWriteZeroes:
      dev_->WriteZeroes(r.offset, r.length, (r.flags & nbd::kCmdFlagNoHole) ? uint32_t{kIoNoUnmap} : 0u,
                        done_fua);
      break;
    case nbd::kCmdCache:
      dev_->Prefetch(r.offset, r.length, done);
      break;
    case nbd::kCmdBlockStatus:
      // The whole range is reported as data, which is honest for every backend.
      Finish(op, Status::OK());
      break;
    default:
      FinishError(op, nbd::kEINVAL);
      break;
  }
}

void NbdConnection::Finish(Op* op, Status st) {
  if (!st.ok()) {
    UB_WARN("nbd: {}: {} at {}+{} failed: {}", peer_, nbd::CmdName(op->req.type), op->req.offset,
            op->req.length, st.ToString());
    FinishError(op, ToNbdError(st));
    return;
  }
  QueueReply(op);
}

void NbdConnection::FinishError(Op* op, uint32_t nbd_error) {
  op->error = nbd_error;
  QueueReply(op);
}

void NbdConnection::QueueReply(Op* op) {
  const nbd::Request& r = op->req;
  uint8_t* h = op->hdr;
  bool structured = limits_.structured_replies &&
                    (r.type == nbd::kCmdRead || r.type == nbd::kCmdBlockStatus);
  if (!structured) {
    StoreBE32(h, nbd::kSimpleReplyMagic);
    StoreBE32(h + 4, op->error);
    StoreBE64(h + 8, r.cookie);
    op->hdr_len = nbd::kSimpleReplySize;
    op->data_len = (op->error == 0 && r.type == nbd::kCmdRead) ? r.length : 0;
  } else {
    StoreBE32(h, nbd::kStructuredReplyMagic);
    StoreBE16(h + 4, nbd::kReplyFlagDone);
    StoreBE64(h + 8, r.cookie);
    if (op->error) {
      StoreBE16(h + 6, nbd::kReplyTypeError);
      StoreBE32(h + 16, 6);  // error + empty message
      StoreBE32(h + 20, op->error);
      StoreBE16(h + 24, 0);
      op->hdr_len = 26;
    } else if (r.type == nbd::kCmdRead) {
      StoreBE16(h + 6, nbd::kReplyTypeOffsetData);
      StoreBE32(h + 16, 8 + r.length);
      StoreBE64(h + 20, r.offset);
      op->hdr_len = 28;
      op->data_len = r.length;
    } else {
      // One extent for the whole range: all data, no holes we know of.
      uint64_t len = std::min<uint64_t>(r.length, limits_.size - r.offset);
      uint32_t max = 0xffffffffu - (0xffffffffu % limits_.min_block) - (limits_.min_block - 1);
      if (len > max) len = max;
      StoreBE16(h + 6, nbd::kReplyTypeBlockStatus);
      StoreBE32(h + 16, 12);
      StoreBE32(h + 20, nbd::kMetaContextBaseAllocation);
      StoreBE32(h + 24, static_cast<uint32_t>(len));
      StoreBE32(h + 28, 0);
      op->hdr_len = 32;
    }
  }
  op->clear = !tls_;
  send_queue_.push_back(op);
  ScheduleSend();
}

void NbdConnection::QueueRaw(std::string bytes) {
  Op* op = new Op();
  op->raw = std::move(bytes);
  op->clear = !tls_;
  ops_live_++;
  send_queue_.push_back(op);
  ScheduleSend();
}

void NbdConnection::ScheduleSend() {
  if (send_scheduled_) return;
  send_scheduled_ = true;
  // Replies that complete in the same reactor turn leave in one sendmsg.
  reactor_->Defer([this] {
    send_scheduled_ = false;
    SendNow();
    MaybeClose();
  });
}

void NbdConnection::SendNow() {
  if (send_inflight_ || (send_queue_.empty() && !(tls_ && tls_->has_ciphertext()))) return;
  if (fatal_) {
    while (!send_queue_.empty()) {
      FreeOp(send_queue_.front());
      send_queue_.pop_front();
    }
    if (tls_) tls_->TakeCiphertext(&wire_);
    return;
  }
  iov_.clear();
  sending_.clear();
  size_t batch_bytes = 0;
  while (!send_queue_.empty() && send_queue_.front()->clear && SendBatchHasRoom(iov_.size(), batch_bytes)) {
    Op* op = send_queue_.front();
    send_queue_.pop_front();
    sending_.push_back(op);
    if (!op->raw.empty()) {
      iov_.push_back({op->raw.data(), op->raw.size()});
      batch_bytes += op->raw.size();
      continue;
    }
    iov_.push_back({op->hdr, op->hdr_len});
    if (op->data_len) iov_.push_back({op->buf, op->data_len});
    batch_bytes += op->hdr_len + op->data_len;
  }
  if (tls_ && (send_queue_.empty() || !send_queue_.front()->clear)) {
    EncryptQueued();
    if (fatal_) return;
    if (!wire_.empty()) iov_.push_back({wire_.data(), wire_.size()});
  }
  if (iov_.empty()) return;
  iov_first_ = 0;
  std::memset(&msg_, 0, sizeof msg_);
  msg_.msg_iov = iov_.data();
  msg_.msg_iovlen = iov_.size();
  io_uring_sqe* sqe = reactor_->PrepareSqe(&send_c_);
  io_uring_prep_sendmsg(sqe, fd_, &msg_, MSG_NOSIGNAL);
  send_inflight_ = true;
}

void NbdConnection::EncryptQueued() {
  size_t budget = kNbdTlsSendBatch;  // the rest waits, still a queued reply
  Status st;
  while (st.ok() && !send_queue_.empty() && budget > 0) {
    Op* op = send_queue_.front();
    // The reply as one byte stream: header (or handshake bytes), then data.
    const uint8_t* head = op->raw.empty() ? op->hdr : reinterpret_cast<const uint8_t*>(op->raw.data());
    size_t head_len = op->raw.empty() ? op->hdr_len : op->raw.size();
    size_t total = head_len + op->data_len;
    while (st.ok() && op->encrypted < total && budget > 0) {
      bool in_head = op->encrypted < head_len;
      const uint8_t* p = in_head ? head + op->encrypted : op->buf + (op->encrypted - head_len);
      size_t n = std::min(budget, (in_head ? head_len : total) - op->encrypted);
      st = tls_->Write(p, n);
      op->encrypted += n;
      budget -= n;
    }
    if (op->encrypted < total) break;  // the rest in the next sendmsg
    send_queue_.pop_front();
    FreeOp(op);  // its bytes are in the session's ciphertext now
  }
  if (!st.ok()) {
    UB_WARN("nbd: {}: {}; closing the connection", peer_, st.message());
    fatal_ = true;
    StopReading("TLS error");
    SendNow();  // drops what is queued
    return;
  }
  tls_->TakeCiphertext(&wire_);
}

void NbdConnection::OnSend(int32_t res) {
  send_inflight_ = false;
  if (res == -EINTR || res == -EAGAIN) res = 0;
  if (res < 0) {
    UB_DEBUG("nbd: {}: send: {}", peer_, std::strerror(-res));
    fatal_ = true;
    for (Op* op : sending_) FreeOp(op);
    sending_.clear();
    StopReading("send error");
    SendNow();  // drops what is queued
    MaybeClose();
    return;
  }
  // Advance past what was sent; resubmit the rest of a short send.
  size_t left = static_cast<size_t>(res);
  while (iov_first_ < iov_.size() && left >= iov_[iov_first_].iov_len) {
    left -= iov_[iov_first_].iov_len;
    iov_first_++;
  }
  if (iov_first_ < iov_.size()) {
    iov_[iov_first_].iov_base = static_cast<uint8_t*>(iov_[iov_first_].iov_base) + left;
    iov_[iov_first_].iov_len -= left;
    msg_.msg_iov = iov_.data() + iov_first_;
    msg_.msg_iovlen = iov_.size() - iov_first_;
    io_uring_sqe* sqe = reactor_->PrepareSqe(&send_c_);
    io_uring_prep_sendmsg(sqe, fd_, &msg_, MSG_NOSIGNAL);
    send_inflight_ = true;
    return;
  }
  std::vector<Op*> sent;
  sent.swap(sending_);
  for (Op* op : sent) FreeOp(op);
  SendNow();
  MaybeClose();
}

bool NbdConnection::SendBatchHasRoom(size_t iovs, size_t bytes) {
  return iovs + 3 <= kMaxIovPerSend && bytes < kNbdSendBatchBytes;
}

bool NbdConnection::Full() const { return ops_live_ >= kMaxLiveOps || live_bytes_ >= kNbdMaxLiveBytes; }

void NbdConnection::FreeOp(Op* op) {
  bool was_full = Full();
  if (op->buf) {
    BufferPool::ForThread().Put(op->buf, op->cap);
    live_bytes_ -= op->cap;
  }
  delete op;
  ops_live_--;
  if (was_full && reading_ && !resume_scheduled_) {
    // Below the limits again: parse what is buffered and read on.
    resume_scheduled_ = true;
    reactor_->Defer([this] {
      resume_scheduled_ = false;
      Process();
      ArmRecv();
      MaybeClose();
    });
  }
}

void NbdConnection::StopReading(const char* why) {
  if (reading_) UB_DEBUG("nbd: {}: stop reading: {}", peer_, why);
  reading_ = false;
  if (recv_inflight_) {
    io_uring_sqe* sqe = reactor_->PrepareSqe(&cancel_c_);
    io_uring_prep_cancel(sqe, &recv_c_, 0);
  }
  if (payload_op_) {
    // The request never got its payload; it will not be executed.
    Op* op = payload_op_;
    payload_op_ = nullptr;
    FreeOp(op);
  }
  phase_ = Phase::kClosing;
  MaybeClose();
}

bool NbdConnection::Idle() const {
  return !reading_ && !recv_inflight_ && !send_inflight_ && !send_scheduled_ && !resume_scheduled_ &&
         ops_live_ == 0 && send_queue_.empty() && !(tls_ && tls_->has_ciphertext());
}

void NbdConnection::MaybeClose() {
  if (!Idle() || close_scheduled_) return;
  if (tls_ && tls_->handshake_done() && !tls_bye_ && !fatal_) {
    // Every reply is out: end the TLS session properly, then close.
    tls_bye_ = true;
    tls_->Bye();
    ScheduleSend();
    return;
  }
  // Deleted from a deferred step, never in the middle of a call chain that
  // may still touch the connection.
  close_scheduled_ = true;
  reactor_->Defer([this] {
    close_scheduled_ = false;
    if (!Idle()) return;
    UB_DEBUG("nbd: {}: closed", peer_);
    NbdServer* server = server_;
    delete this;
    server->ConnectionClosed();
  });
}

}  // namespace ubcache
