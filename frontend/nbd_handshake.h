// SPDX-License-Identifier: Apache-2.0
// NbdHandshake: the fixed-newstyle negotiation as a pure state machine —
// bytes in, bytes out, no sockets — so it can be fuzzed and unit-tested.
//
// The connection feeds whatever it received; the handshake consumes what
// it can, appends replies to `out`, and says whether it needs more bytes,
// is done (transmission starts with the next byte), or the connection
// must be closed. Option data is bounded (kMaxOptionLength); longer
// options are answered with an error and their data is skipped.
//
// Thread safety: a value owned by one connection.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ubcache::nbd {

struct ExportInfo {
  std::string name;
  std::string description;
  uint64_t size = 0;
  uint16_t flags = 0;  // transmission flags
  uint32_t min_block = 512;
  uint32_t preferred_block = 4096;
  uint32_t max_block = 32u << 20;
};

// TLS (NBD_OPT_STARTTLS): off — STARTTLS is unsupported; on — a client may
// upgrade; require — nothing but STARTTLS (and ABORT) is answered before
// TLS: other options get NBD_REP_ERR_TLS_REQD, EXPORT_NAME closes, so a
// plaintext client learns nothing, not even the export list.
enum class TlsPolicy { kOff, kOn, kRequire };

class Handshake {
 public:
  // kStartTls: STARTTLS was acknowledged; every byte from here on is TLS.
  // The connection runs the TLS handshake, then calls TlsStarted() and
  // feeds the decrypted bytes. Bytes fed before that close the connection
  // (a plaintext injection after STARTTLS).
  enum class State { kNeedMore, kDone, kClose, kStartTls };

  // `exports` outlives the handshake; the first one is also served under
  // the empty name "".
  explicit Handshake(const std::vector<ExportInfo>* exports, TlsPolicy tls = TlsPolicy::kOff)
      : exports_(exports), tls_policy_(tls) {}

  // The server's greeting, sent as soon as the client connects.
  static void Greeting(std::string* out);

  // Consumes bytes from `data`, sets `*consumed`, appends replies to `out`.
  State Feed(const uint8_t* data, size_t len, size_t* consumed, std::string* out);

  // After kDone:
  int export_index() const { return export_index_; }
  bool structured_replies() const { return structured_; }
  bool base_allocation() const { return base_allocation_; }
  // After kClose: why, for the log.
  const std::string& close_reason() const { return close_reason_; }
  // After kStartTls, once the TLS handshake is done: option haggling
  // starts over, as the protocol says, forgetting what was negotiated in
  // plaintext.
  void TlsStarted();
  bool tls() const { return tls_; }

 private:
  enum class Phase { kClientFlags, kOptionHeader, kOptionData, kSkipData, kTlsPending, kDone, kClosed };

  State HandleOption(std::string* out);
  int FindExport(const std::string& name) const;
  void Reply(std::string* out, uint32_t type, const std::string& data = "");
  void ReplyError(std::string* out, uint32_t type, const std::string& msg);
  State HandleInfoOrGo(std::string* out);
  State HandleMetaContext(std::string* out);
  State Close(std::string reason);

  const std::vector<ExportInfo>* exports_;
  TlsPolicy tls_policy_;
  bool tls_ = false;
  Phase phase_ = Phase::kClientFlags;
  bool no_zeroes_ = false;
  bool structured_ = false;
  bool base_allocation_ = false;
  int export_index_ = -1;
  uint32_t option_ = 0;
  uint32_t option_len_ = 0;
  uint64_t skip_left_ = 0;
  std::string buf_;  // bytes of the current header or option data
  std::string close_reason_;
};

}  // namespace ubcache::nbd
