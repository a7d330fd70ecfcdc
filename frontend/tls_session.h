// SPDX-License-Identifier: Apache-2.0
// TlsSession: one end of a TLS connection (GnuTLS) over memory, not over a
// socket, so that the NBD connection keeps its own io_uring recv and send:
// it feeds what it received in (FeedCiphertext), drives the handshake,
// takes plaintext out (Read) and puts plaintext in (Write), and sends what
// the session has for the wire (TakeCiphertext). No call ever blocks; a
// call that needs more input returns "again" and the caller recvs more.
//
// Credentials follow nbdkit's and qemu-nbd's conventions, so the same files
// serve all three:
//   X.509: a directory with ca-cert.pem, server-cert.pem, server-key.pem
//          (clients: client-cert.pem, client-key.pem); with verify_peer the
//          server requires a client certificate signed by ca-cert.pem.
//   PSK:   a file of "identity:hexkey" lines, as psktool writes them.
//
// Thread safety: a session belongs to one connection on one reactor;
// credentials are immutable after creation and shared between sessions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/status.h"

namespace ubcache {

class TlsCredentials {
 public:
  enum class Kind { kX509, kPsk };
  ~TlsCredentials();
  TlsCredentials(const TlsCredentials&) = delete;
  TlsCredentials& operator=(const TlsCredentials&) = delete;

  // Server side. Errors name the file that is missing or bad.
  static Result<std::shared_ptr<TlsCredentials>> ServerX509(const std::string& dir, bool verify_peer);
  static Result<std::shared_ptr<TlsCredentials>> ServerPsk(const std::string& psk_file);
  // Client side (tests, and the nbd: backend's peers): a CA directory (with
  // client-cert.pem/client-key.pem if present), or one identity and key.
  static Result<std::shared_ptr<TlsCredentials>> ClientX509(const std::string& dir);
  static Result<std::shared_ptr<TlsCredentials>> ClientPsk(const std::string& identity,
                                                           const std::string& hex_key);

  Kind kind() const { return kind_; }
  bool server() const { return server_; }
  bool verify_peer() const { return verify_peer_; }

 private:
  friend class TlsSession;
  TlsCredentials(Kind kind, bool server) : kind_(kind), server_(server) {}
  Kind kind_;
  bool server_;
  bool verify_peer_ = false;
  void* cred_ = nullptr;  // gnutls_certificate_credentials_t or gnutls_psk_*_credentials_t
};

class TlsSession {
 public:
  // What a non-blocking step came to.
  enum class Step { kDone, kAgain };

  static Result<std::unique_ptr<TlsSession>> Create(std::shared_ptr<TlsCredentials> creds,
                                                    const std::string& server_name = "");
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Bytes received from the peer. What a Read or Handshake consumed is
  // dropped first, so the queue holds at most one partial record plus
  // `len`.
  void FeedCiphertext(const uint8_t* data, size_t len);
  // Replaces *wire with the bytes to send to the peer, in order, and
  // empties the session's queue; the two vectors swap, so neither
  // allocates again in steady state.
  void TakeCiphertext(std::vector<uint8_t>* wire);
  bool has_ciphertext() const { return !out_.empty(); }

  // Advances the handshake: kDone once it is complete (the peer checked as
  // the credentials demand), kAgain when it waits for the peer's bytes.
  // Errors: the peer is refused (bad certificate, unknown PSK identity or
  // wrong key) or spoke no TLS; the message says which.
  Result<Step> Handshake();
  bool handshake_done() const { return done_; }

  // Up to `cap` bytes of plaintext; 0 with kAgain-like meaning when none is
  // decryptable yet (*eof set when the peer closed the TLS session).
  Result<size_t> Read(uint8_t* buf, size_t cap, bool* eof);
  // Encrypts `len` bytes into the ciphertext queue.
  Status Write(const void* data, size_t len);
  // Queues the close_notify alert.
  void Bye();

  // The peer's identity after the handshake: the PSK identity, or the
  // client certificate's distinguished name; empty when none.
  std::string peer() const;
  // What the handshake chose, as GnuTLS describes it:
  // "(TLS1.3)-(ECDHE-SECP256R1)-(RSA-PSS-RSAE-SHA256)-(AES-256-GCM)".
  std::string description() const;

 private:
  friend struct TlsTransport;  // the GnuTLS push/pull functions
  TlsSession() = default;

  void* session_ = nullptr;  // gnutls_session_t
  std::shared_ptr<TlsCredentials> creds_;
  std::vector<uint8_t> in_;
  size_t in_pos_ = 0;
  std::vector<uint8_t> out_;
  bool done_ = false;
};

}  // namespace ubcache
