// SPDX-License-Identifier: Apache-2.0
#include "frontend/tls_session.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ubcache {

namespace {

Status TlsError(const std::string& what, int rc) {
  return Status::InvalidArgument(what + ": " + gnutls_strerror(rc));
}

bool Readable(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// PSK suites after the defaults, as nbdkit and qemu ask for them, with
// ChaCha20 moved behind AES-128-GCM and the server's order deciding. A TLS
// 1.3 PSK is bound to SHA-256, which rules out AES-256-GCM (SHA-384), and
// NORMAL lists ChaCha20 before AES-128-GCM: PSK sessions got ChaCha20,
// 3.8x slower than X.509's AES-256-GCM on 1 MiB reads on a CPU with
// AES-NI (bench/tls_bench.sh, issue 14). Servers have AES-NI.
constexpr const char* kPskPriority =
    "NORMAL:-CHACHA20-POLY1305:+CHACHA20-POLY1305:+ECDHE-PSK:+DHE-PSK:+PSK:%SERVER_PRECEDENCE";

}  // namespace

// GnuTLS's transport: the session's memory queues instead of a socket.
struct TlsTransport {
  static ssize_t Push(gnutls_transport_ptr_t p, const void* data, size_t len) {
    auto* s = static_cast<TlsSession*>(p);
    const auto* b = static_cast<const uint8_t*>(data);
    s->out_.insert(s->out_.end(), b, b + len);
    return static_cast<ssize_t>(len);
  }
  static ssize_t Pull(gnutls_transport_ptr_t p, void* data, size_t len) {
    auto* s = static_cast<TlsSession*>(p);
    size_t avail = s->in_.size() - s->in_pos_;
    if (avail == 0) {
      gnutls_transport_set_errno(static_cast<gnutls_session_t>(s->session_), EAGAIN);
      return -1;
    }
    size_t n = std::min(avail, len);
    std::memcpy(data, s->in_.data() + s->in_pos_, n);
    s->in_pos_ += n;
    if (s->in_pos_ == s->in_.size()) {
      s->in_.clear();
      s->in_pos_ = 0;
    }
    return static_cast<ssize_t>(n);
  }
};

TlsCredentials::~TlsCredentials() {
  if (!cred_) return;
  if (kind_ == Kind::kX509) {
    gnutls_certificate_free_credentials(static_cast<gnutls_certificate_credentials_t>(cred_));
  } else if (server_) {
    gnutls_psk_free_server_credentials(static_cast<gnutls_psk_server_credentials_t>(cred_));
  } else {
    gnutls_psk_free_client_credentials(static_cast<gnutls_psk_client_credentials_t>(cred_));
  }
}

Result<std::shared_ptr<TlsCredentials>> TlsCredentials::ServerX509(const std::string& dir,
                                                                 bool verify_peer) {
  std::string cert = dir + "/server-cert.pem", key = dir + "/server-key.pem", ca = dir + "/ca-cert.pem";
  for (const std::string& f : {cert, key})
    if (!Readable(f)) return Status::InvalidArgument("TLS certificates: " + f + " not found");
  if (verify_peer && !Readable(ca))
    return Status::InvalidArgument("TLS certificates: " + ca + " not found (needed to verify clients)");
  std::shared_ptr<TlsCredentials> c(new TlsCredentials(Kind::kX509, true));
  gnutls_certificate_credentials_t x;
  int rc = gnutls_certificate_allocate_credentials(&x);
  if (rc < 0) return TlsError("TLS credentials", rc);
  c->cred_ = x;
  rc = gnutls_certificate_set_x509_key_file(x, cert.c_str(), key.c_str(), GNUTLS_X509_FMT_PEM);
  if (rc < 0) return TlsError("TLS certificates: " + cert + " / " + key, rc);
  if (Readable(ca)) {
    rc = gnutls_certificate_set_x509_trust_file(x, ca.c_str(), GNUTLS_X509_FMT_PEM);
    if (rc < 0) return TlsError("TLS certificates: " + ca, rc);
  }
  c->verify_peer_ = verify_peer;
  return c;
}

Result<std::shared_ptr<TlsCredentials>> TlsCredentials::ServerPsk(const std::string& psk_file) {
  if (!Readable(psk_file)) return Status::InvalidArgument("TLS PSK file " + psk_file + " not found");
  std::shared_ptr<TlsCredentials> c(new TlsCredentials(Kind::kPsk, true));
  gnutls_psk_server_credentials_t p;
  int rc = gnutls_psk_allocate_server_credentials(&p);
  if (rc < 0) return TlsError("TLS credentials", rc);
  c->cred_ = p;
  rc = gnutls_psk_set_server_credentials_file(p, psk_file.c_str());
  if (rc < 0) return TlsError("TLS PSK file " + psk_file, rc);
  return c;
}

Result<std::shared_ptr<TlsCredentials>> TlsCredentials::ClientX509(const std::string& dir) {
  std::string ca = dir + "/ca-cert.pem", cert = dir + "/client-cert.pem", key = dir + "/client-key.pem";
  if (!Readable(ca)) return Status::InvalidArgument("TLS certificates: " + ca + " not found");
  std::shared_ptr<TlsCredentials> c(new TlsCredentials(Kind::kX509, false));
  gnutls_certificate_credentials_t x;
  int rc = gnutls_certificate_allocate_credentials(&x);
  if (rc < 0) return TlsError("TLS credentials", rc);
  c->cred_ = x;
  rc = gnutls_certificate_set_x509_trust_file(x, ca.c_str(), GNUTLS_X509_FMT_PEM);
  if (rc < 0) return TlsError("TLS certificates: " + ca, rc);
  if (Readable(cert) && Readable(key)) {
    rc = gnutls_certificate_set_x509_key_file(x, cert.c_str(), key.c_str(), GNUTLS_X509_FMT_PEM);
    if (rc < 0) return TlsError("TLS certificates: " + cert, rc);
  }
  c->verify_peer_ = true;
  return c;
}

Result<std::shared_ptr<TlsCredentials>> TlsCredentials::ClientPsk(const std::string& identity,
                                                                const std::string& hex_key) {
  std::shared_ptr<TlsCredentials> c(new TlsCredentials(Kind::kPsk, false));
  gnutls_psk_client_credentials_t p;
  int rc = gnutls_psk_allocate_client_credentials(&p);
  if (rc < 0) return TlsError("TLS credentials", rc);
  c->cred_ = p;
  gnutls_datum_t key{reinterpret_cast<unsigned char*>(const_cast<char*>(hex_key.data())),
                     static_cast<unsigned>(hex_key.size())};
  rc = gnutls_psk_set_client_credentials(p, identity.c_str(), &key, GNUTLS_PSK_KEY_HEX);
  if (rc < 0) return TlsError("TLS PSK key for '" + identity + "'", rc);
  return c;
}

Result<std::unique_ptr<TlsSession>> TlsSession::Create(std::shared_ptr<TlsCredentials> creds,
                                                       const std::string& server_name) {
  std::unique_ptr<TlsSession> t(new TlsSession());
  gnutls_session_t s;
  int rc = gnutls_init(&s, (creds->server() ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NONBLOCK);
  if (rc < 0) return TlsError("TLS session", rc);
  t->session_ = s;
  t->creds_ = std::move(creds);
  const TlsCredentials& c = *t->creds_;
  if (c.kind() == TlsCredentials::Kind::kPsk) {
    rc = gnutls_priority_set_direct(s, kPskPriority, nullptr);
    if (rc >= 0) rc = gnutls_credentials_set(s, GNUTLS_CRD_PSK, c.cred_);
  } else {
    rc = gnutls_set_default_priority(s);
    if (rc >= 0) rc = gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, c.cred_);
    if (rc >= 0 && c.server() && c.verify_peer()) {
      gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
      gnutls_session_set_verify_cert(s, nullptr, 0);
    }
    if (rc >= 0 && !c.server()) {
      if (!server_name.empty())
        rc = gnutls_server_name_set(s, GNUTLS_NAME_DNS, server_name.data(), server_name.size());
      gnutls_session_set_verify_cert(s, server_name.empty() ? nullptr : server_name.c_str(), 0);
    }
  }
  if (rc < 0) return TlsError("TLS session", rc);
  gnutls_transport_set_ptr(s, t.get());
  gnutls_transport_set_push_function(s, TlsTransport::Push);
  gnutls_transport_set_pull_function(s, TlsTransport::Pull);
  return t;
}

TlsSession::~TlsSession() {
  if (session_) gnutls_deinit(static_cast<gnutls_session_t>(session_));
}

void TlsSession::FeedCiphertext(const uint8_t* data, size_t len) {
  if (in_pos_ > 0) {
    in_.erase(in_.begin(), in_.begin() + static_cast<ptrdiff_t>(in_pos_));
    in_pos_ = 0;
  }
  in_.insert(in_.end(), data, data + len);
}

void TlsSession::TakeCiphertext(std::vector<uint8_t>* wire) {
  wire->clear();
  wire->swap(out_);
}

Result<TlsSession::Step> TlsSession::Handshake() {
  if (done_) return Step::kDone;
  auto s = static_cast<gnutls_session_t>(session_);
  int rc = gnutls_handshake(s);
  if (rc == GNUTLS_E_SUCCESS) {
    done_ = true;
    return Step::kDone;
  }
  if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED || !gnutls_error_is_fatal(rc))
    return Step::kAgain;
  // Tell the peer why (an alert into the ciphertext queue), as a socket
  // transport would have: "certificate required", "unknown PSK identity"...
  (void)gnutls_alert_send_appropriate(s, rc);
  if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
    gnutls_datum_t why{};
    unsigned status = gnutls_session_get_verify_cert_status(s);
    gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &why, 0);
    std::string msg = "TLS handshake: the peer's certificate was refused: " +
                      std::string(why.data ? reinterpret_cast<char*>(why.data) : "?");
    gnutls_free(why.data);
    return Status::Permission(msg);
  }
  return Status::Permission(std::string("TLS handshake: ") + gnutls_strerror(rc));
}

Result<size_t> TlsSession::Read(uint8_t* buf, size_t cap, bool* eof) {
  *eof = false;
  ssize_t rc = gnutls_record_recv(static_cast<gnutls_session_t>(session_), buf, cap);
  if (rc > 0) return static_cast<size_t>(rc);
  if (rc == 0) {
    *eof = true;
    return size_t{0};
  }
  if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED) return size_t{0};
  return Status::IoError(std::string("TLS: ") + gnutls_strerror(static_cast<int>(rc)));
}

Status TlsSession::Write(const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    ssize_t rc = gnutls_record_send(static_cast<gnutls_session_t>(session_), p, len);
    if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED) continue;  // memory transport: never for long
    if (rc < 0) return Status::IoError(std::string("TLS: ") + gnutls_strerror(static_cast<int>(rc)));
    p += rc;
    len -= static_cast<size_t>(rc);
  }
  return Status::OK();
}

std::string TlsSession::description() const {
  char* d = gnutls_session_get_desc(static_cast<gnutls_session_t>(session_));
  std::string out = d ? d : "";
  gnutls_free(d);
  return out;
}

void TlsSession::Bye() { gnutls_bye(static_cast<gnutls_session_t>(session_), GNUTLS_SHUT_WR); }

std::string TlsSession::peer() const {
  auto s = static_cast<gnutls_session_t>(session_);
  if (!done_) return "";
  if (creds_->kind() == TlsCredentials::Kind::kPsk) {
    const char* u = creds_->server() ? gnutls_psk_server_get_username(s) : nullptr;
    return u ? u : "";
  }
  unsigned n = 0;
  const gnutls_datum_t* certs = gnutls_certificate_get_peers(s, &n);
  if (!certs || n == 0) return "";
  gnutls_x509_crt_t crt;
  if (gnutls_x509_crt_init(&crt) < 0) return "";
  std::string dn;
  gnutls_datum_t d{};
  if (gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) >= 0 && gnutls_x509_crt_get_dn2(crt, &d) >= 0) {
    dn.assign(reinterpret_cast<char*>(d.data), d.size);
    gnutls_free(d.data);
  }
  gnutls_x509_crt_deinit(crt);
  return dn;
}

}  // namespace ubcache
