// SPDX-License-Identifier: Apache-2.0
// NbdConnection: one client connection, owned by one reactor thread.
//
// Input: a receive buffer that recv SQEs fill; complete requests are
// parsed out of it. A large WRITE payload that has not all arrived is
// received straight into the request's own buffer (one MSG_WAITALL recv);
// small ones keep flowing through the receive buffer.
// Output: completed requests queue their replies; one sendmsg gathers all
// queued replies at the end of the reactor turn. At most one recv and one
// send are in flight at a time.
//
// TLS (after NBD_OPT_STARTTLS): recvs land in a ciphertext buffer, the
// session decrypts into the receive buffer and parsing goes on as before
// (no direct payload receives: every byte passes the session). Replies are
// encrypted when a send is about to start, at most kTlsSendBatch bytes at
// a time, so ciphertext never piles up behind a slow client: what is not
// yet encrypted stays a queued reply and counts against the live limits.
// Everything queued before STARTTLS took effect (its ACK) goes in clear,
// ahead of the first TLS byte.
//
// Thread safety: every method runs on the owning reactor's thread.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <sys/uio.h>
#include <vector>

#include "backend/reactor.h"
#include "frontend/nbd_handshake.h"
#include "frontend/nbd_proto.h"
#include "frontend/nbd_server.h"
#include "frontend/tls_session.h"
#include "util/aligned_buffer.h"

namespace ubcache {

// Buffer bytes of a connection's requests in flight past which it stops
// reading requests (nbd_connection.cpp).
inline constexpr size_t kNbdMaxLiveBytes = 32u << 20;
// Under TLS, what a connection holds besides: the ciphertext recv buffer
// and the session's copy of it, and one send batch of ciphertext in flight
// plus the session's queue for the next (with record overhead).
inline constexpr size_t kNbdTlsRecvBytes = 256u << 10;
inline constexpr size_t kNbdTlsSendBatch = 1u << 20;
inline constexpr size_t kNbdMaxTlsBytes = 2 * kNbdTlsRecvBytes + 2 * (kNbdTlsSendBatch + (64u << 10));
// Replies ready together leave in one sendmsg until it holds this many
// bytes; the reply that crosses the bound still goes, so a bigger reply is
// sent alone. io_uring runs a sendmsg inline, so a batch's bytes are the
// time the reactor spends copying before it reads the next requests.
// Unbounded, 1 MiB reads at QD8 ran in convoy: the eight replies left in
// one 8 MiB sendmsg (1.5 ms in the kernel, the disk idle meanwhile), the
// eight next requests arrived behind it and went to the disk together,
// where they merged into two 4 MiB requests that completed together — a
// file export kept ~4.8 of the client's 8 MiB at the disk (qemu-nbd ~7) and
// read at 1.2-1.3 GB/s; bounded, 1.6-1.8 GB/s (issue 28). Small replies
// still batch: 4 KiB reads at QD32 all fit in one send.
inline constexpr size_t kNbdSendBatchBytes = 256u << 10;

class NbdConnection {
 public:
  NbdConnection(NbdServer* server, int fd, std::string peer);
  ~NbdConnection();
  // Sends the greeting and starts reading.
  void Start();
  // Server shutdown: stop reading; close once in-flight requests are answered.
  void BeginShutdown();

  // Connections on this reactor thread, for shutdown.
  static std::vector<NbdConnection*>& OnThisThread();

  // Whether a sendmsg that holds `iovs` iovecs and `bytes` bytes takes the
  // next queued reply (kNbdSendBatchBytes; a reply needs up to 3 iovecs).
  static bool SendBatchHasRoom(size_t iovs, size_t bytes);

 private:
  struct Op;
  struct RecvCompletion final : IoCompletion {
    NbdConnection* conn;
    void Complete(int32_t res, uint32_t) override { conn->OnRecv(res); }
  };
  struct SendCompletion final : IoCompletion {
    NbdConnection* conn;
    void Complete(int32_t res, uint32_t) override { conn->OnSend(res); }
  };
  struct CancelCompletion final : IoCompletion {
    void Complete(int32_t, uint32_t) override {}
  };
  enum class Phase { kHandshake, kHeader, kPayload, kDiscard, kClosing };

  void ArmRecv();
  void OnRecv(int32_t res);
  void Process();
  bool ProcessHandshake();
  // TLS: the STARTTLS switch; received ciphertext; plaintext into rbuf_
  // (false when the connection stops reading).
  void StartTls();
  void OnTlsRecv(size_t len);
  bool PullPlaintext();
  // Encrypts queued replies into wire_, up to kTlsSendBatch bytes.
  void EncryptQueued();
  bool ProcessRequests();
  void StartRequest(const nbd::Request& req);
  void Execute(Op* op);
  void Finish(Op* op, Status st);
  void FinishError(Op* op, uint32_t nbd_error);
  void QueueReply(Op* op);
  void QueueRaw(std::string bytes);
  void ScheduleSend();
  void SendNow();
  void OnSend(int32_t res);
  void StopReading(const char* why);
  void MaybeClose();
  bool Idle() const;
  void FreeOp(Op* op);
  // Over a live-op limit (kMaxLiveOps, kNbdMaxLiveBytes): stop reading requests.
  bool Full() const;

  NbdServer* server_;
  int fd_;
  std::string peer_;
  Reactor* reactor_;
  BlockDevice* dev_ = nullptr;
  nbd::ExportLimits limits_{};
  // The server's export list as this connection's handshake answers it:
  // sizes are read again before each step (ProcessHandshake), so NBD_OPT_INFO
  // and NBD_OPT_GO give the size an export has now (it may have grown
  // since the server started); the size a connection got stays its own.
  std::vector<nbd::ExportInfo> infos_;
  nbd::Handshake handshake_;
  Phase phase_ = Phase::kHandshake;

  AlignedBuffer rbuf_;
  size_t rstart_ = 0, rend_ = 0;
  Op* payload_op_ = nullptr;  // WRITE whose payload is still arriving
  uint32_t payload_got_ = 0;
  bool payload_direct_ = false;  // received into payload_op_->buf, not rbuf_
  uint64_t discard_left_ = 0;  // payload of a refused WRITE still to skip

  std::unique_ptr<TlsSession> tls_;  // after STARTTLS
  std::vector<uint8_t> crbuf_;       // ciphertext recv buffer, under TLS
  std::vector<uint8_t> wire_;        // ciphertext of the sendmsg in flight
  bool tls_eof_ = false;             // the client sent close_notify
  bool tls_bye_ = false;             // our close_notify is queued

  RecvCompletion recv_c_;
  SendCompletion send_c_;
  CancelCompletion cancel_c_;
  bool recv_inflight_ = false;
  bool send_inflight_ = false;
  bool send_scheduled_ = false;
  bool resume_scheduled_ = false;  // parsing resumes after the live-op limit
  bool close_scheduled_ = false;
  bool reading_ = true;     // false after EOF, DISC, an error or shutdown
  bool fatal_ = false;      // socket error: drop replies, close as soon as idle
  uint32_t ops_live_ = 0;   // executing or waiting to be sent
  size_t live_bytes_ = 0;   // their buffers' capacity

  std::deque<Op*> send_queue_;   // replies waiting for the next sendmsg
  std::vector<Op*> sending_;     // replies in the sendmsg in flight
  std::vector<iovec> iov_;
  size_t iov_first_ = 0;         // first iovec not yet fully sent
  msghdr msg_{};
};

}  // namespace ubcache
