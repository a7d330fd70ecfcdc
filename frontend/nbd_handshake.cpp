// SPDX-License-Identifier: Apache-2.0
#include "frontend/nbd_handshake.h"

#include <algorithm>

#include "frontend/nbd_proto.h"
#include "util/endian.h"

namespace ubcache::nbd {

namespace {

void Put16(std::string* s, uint16_t v) {
  uint8_t b[2];
  StoreBE16(b, v);
  s->append(reinterpret_cast<char*>(b), 2);
}
void Put32(std::string* s, uint32_t v) {
  uint8_t b[4];
  StoreBE32(b, v);
  s->append(reinterpret_cast<char*>(b), 4);
}
void Put64(std::string* s, uint64_t v) {
  uint8_t b[8];
  StoreBE64(b, v);
  s->append(reinterpret_cast<char*>(b), 8);
}

// Reads length-prefixed fields of option data, refusing to run past its end.
class Reader {
 public:
  explicit Reader(const std::string& s) : p_(reinterpret_cast<const uint8_t*>(s.data())), left_(s.size()) {}
  bool U16(uint16_t* v) {
    if (left_ < 2) return false;
    *v = LoadBE16(p_);
    p_ += 2;
    left_ -= 2;
    return true;
  }
  bool U32(uint32_t* v) {
    if (left_ < 4) return false;
    *v = LoadBE32(p_);
    p_ += 4;
    left_ -= 4;
    return true;
  }
  bool Str(uint32_t len, std::string* v) {
    if (left_ < len) return false;
    v->assign(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    left_ -= len;
    return true;
  }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

}  // namespace

void Handshake::Greeting(std::string* out) {
  Put64(out, kMagicNbd);
  Put64(out, kMagicOpt);
  Put16(out, kFlagFixedNewstyle | kFlagNoZeroes);
}

Handshake::State Handshake::Close(std::string reason) {
  phase_ = Phase::kClosed;
  close_reason_ = std::move(reason);
  return State::kClose;
}

int Handshake::FindExport(const std::string& name) const {
  if (name.empty() && !exports_->empty()) return 0;
  for (size_t i = 0; i < exports_->size(); i++)
    if ((*exports_)[i].name == name) return static_cast<int>(i);
  return -1;
}

void Handshake::Reply(std::string* out, uint32_t type, const std::string& data) {
  Put64(out, kMagicOptReply);
  Put32(out, option_);
  Put32(out, type);
  Put32(out, static_cast<uint32_t>(data.size()));
  out->append(data);
}

void Handshake::ReplyError(std::string* out, uint32_t type, const std::string& msg) {
  Reply(out, type, msg);
}

Handshake::State Handshake::Feed(const uint8_t* data, size_t len, size_t* consumed,
                                 std::string* out) {
  size_t pos = 0;
  auto take = [&](size_t want) {
    size_t n = std::min(want - buf_.size(), len - pos);
    buf_.append(reinterpret_cast<const char*>(data + pos), n);
    pos += n;
    return buf_.size() == want;
  };
  State st = State::kNeedMore;
  while (st == State::kNeedMore && pos < len) {
    switch (phase_) {
      case Phase::kClientFlags: {
        if (!take(4)) break;
        uint32_t flags = LoadBE32(reinterpret_cast<const uint8_t*>(buf_.data()));
        buf_.clear();
        if (!(flags & kClientFixedNewstyle)) {
          st = Close("client does not support fixed newstyle negotiation");
          break;
        }
        if (flags & ~(kClientFixedNewstyle | kClientNoZeroes)) {
          st = Close("unknown client flags");
          break;
        }
        no_zeroes_ = flags & kClientNoZeroes;
        phase_ = Phase::kOptionHeader;
        break;
      }
      case Phase::kOptionHeader: {
        if (!take(16)) break;
        const uint8_t* h = reinterpret_cast<const uint8_t*>(buf_.data());
        if (LoadBE64(h) != kMagicOpt) {
          st = Close("bad option magic");
          break;
        }
        option_ = LoadBE32(h + 8);
        option_len_ = LoadBE32(h + 12);
        buf_.clear();
        if (option_len_ > kMaxOptionLength) {
          if (option_ == kOptExportName) {
            st = Close("export name too long");
            break;
          }
          ReplyError(out, kRepErrTooBig, "option data too long");
          skip_left_ = option_len_;
          phase_ = Phase::kSkipData;
          break;
        }
        phase_ = Phase::kOptionData;
        if (option_len_ == 0) st = HandleOption(out);
        break;
      }
      case Phase::kOptionData:
        if (!take(option_len_)) break;
        st = HandleOption(out);
        break;
      case Phase::kSkipData: {
        uint64_t n = std::min<uint64_t>(skip_left_, len - pos);
        pos += n;
        skip_left_ -= n;
        if (skip_left_ == 0) phase_ = Phase::kOptionHeader;
        break;
      }
      case Phase::kTlsPending:
        st = Close("plaintext bytes after STARTTLS");
        break;
      case Phase::kDone:
        st = State::kDone;
        break;
      case Phase::kClosed:
        st = State::kClose;
        break;
    }
  }
  *consumed = pos;
  // With no bytes the loop never runs: a finished handshake still says so.
  if (st == State::kNeedMore && phase_ == Phase::kDone) st = State::kDone;
  if (st == State::kNeedMore && phase_ == Phase::kClosed) st = State::kClose;
  if (st == State::kNeedMore && phase_ == Phase::kTlsPending) st = State::kStartTls;
  return st;
}

void Handshake::TlsStarted() {
  tls_ = true;
  structured_ = false;
  base_allocation_ = false;
  phase_ = Phase::kOptionHeader;
}

// Called with the whole option data in buf_.
Handshake::State Handshake::HandleOption(std::string* out) {
  std::string data;
  data.swap(buf_);
  phase_ = Phase::kOptionHeader;
  if (tls_policy_ == TlsPolicy::kRequire && !tls_ && option_ != kOptStartTls && option_ != kOptAbort) {
    // This old-style ending has no error reply either.
    if (option_ == kOptExportName) return Close("TLS is required; EXPORT_NAME before STARTTLS");
    ReplyError(out, kRepErrTlsReqd, "TLS is required: send NBD_OPT_STARTTLS first");
    return State::kNeedMore;
  }
  switch (option_) {
    case kOptExportName: {
      int idx = FindExport(data);
      // This old-style ending has no way to report an error: close.
      if (idx < 0) return Close("unknown export '" + data + "'");
      const ExportInfo& e = (*exports_)[idx];
      Put64(out, e.size);
      Put16(out, e.flags);
      if (!no_zeroes_) out->append(124, '\0');
      export_index_ = idx;
      phase_ = Phase::kDone;
      return State::kDone;
    }
    case kOptAbort:
      Reply(out, kRepAck);
      return Close("client aborted");
    case kOptList:
      if (!data.empty()) {
        ReplyError(out, kRepErrInvalid, "LIST takes no data");
        return State::kNeedMore;
      }
      for (const ExportInfo& e : *exports_) {
        std::string d;
        Put32(&d, static_cast<uint32_t>(e.name.size()));
        d += e.name;
        Reply(out, kRepServer, d);
      }
      Reply(out, kRepAck);
      return State::kNeedMore;
    case kOptStructuredReply:
      if (!data.empty()) {
        ReplyError(out, kRepErrInvalid, "STRUCTURED_REPLY takes no data");
      } else if (structured_) {
        ReplyError(out, kRepErrInvalid, "structured replies already negotiated");
      } else {
        structured_ = true;
        Reply(out, kRepAck);
      }
      return State::kNeedMore;
    case kOptInfo:
    case kOptGo:
      buf_.swap(data);
      return HandleInfoOrGo(out);
    case kOptListMetaContext:
    case kOptSetMetaContext:
      buf_.swap(data);
      return HandleMetaContext(out);
    case kOptStartTls:
      if (tls_policy_ == TlsPolicy::kOff) {
        ReplyError(out, kRepErrUnsup, "TLS is not enabled on this server");
      } else if (!data.empty()) {
        ReplyError(out, kRepErrInvalid, "STARTTLS takes no data");
      } else if (tls_) {
        ReplyError(out, kRepErrInvalid, "TLS is already in use");
      } else {
        Reply(out, kRepAck);
        phase_ = Phase::kTlsPending;
        return State::kStartTls;
      }
      return State::kNeedMore;
    default:
      ReplyError(out, kRepErrUnsup, "unknown option");
      return State::kNeedMore;
  }
}

Handshake::State Handshake::HandleInfoOrGo(std::string* out) {
  std::string data;
  data.swap(buf_);
  Reader r(data);
  uint32_t name_len;
  std::string name;
  uint16_t nreq;
  std::vector<uint16_t> reqs;
  bool ok = r.U32(&name_len) && r.Str(name_len, &name) && r.U16(&nreq);
  for (uint16_t i = 0; ok && i < nreq; i++) {
    uint16_t t = 0;
    ok = r.U16(&t);
    reqs.push_back(t);
  }
  if (!ok || r.left() != 0) {
    ReplyError(out, kRepErrInvalid, "malformed INFO/GO request");
    return State::kNeedMore;
  }
  int idx = FindExport(name);
  if (idx < 0) {
    ReplyError(out, kRepErrUnknown, "unknown export");
    return State::kNeedMore;
  }
  const ExportInfo& e = (*exports_)[idx];
  std::string d;
  Put16(&d, kInfoExport);
  Put64(&d, e.size);
  Put16(&d, e.flags);
  Reply(out, kRepInfo, d);
  auto requested = [&](uint16_t t) { return std::find(reqs.begin(), reqs.end(), t) != reqs.end(); };
  if (requested(kInfoName)) {
    d.clear();
    Put16(&d, kInfoName);
    d += e.name;
    Reply(out, kRepInfo, d);
  }
  if (requested(kInfoDescription) && !e.description.empty()) {
    d.clear();
    Put16(&d, kInfoDescription);
    d += e.description;
    Reply(out, kRepInfo, d);
  }
  // Always sent: we reject unaligned requests, so clients must know.
  d.clear();
  Put16(&d, kInfoBlockSize);
  Put32(&d, e.min_block);
  Put32(&d, e.preferred_block);
  Put32(&d, e.max_block);
  Reply(out, kRepInfo, d);
  Reply(out, kRepAck);
  if (option_ == kOptGo) {
    export_index_ = idx;
    phase_ = Phase::kDone;
    return State::kDone;
  }
  return State::kNeedMore;
}

Handshake::State Handshake::HandleMetaContext(std::string* out) {
  std::string data;
  data.swap(buf_);
  const bool set = option_ == kOptSetMetaContext;
  if (set && !structured_) {
    ReplyError(out, kRepErrInvalid, "SET_META_CONTEXT needs structured replies first");
    return State::kNeedMore;
  }
  Reader r(data);
  uint32_t name_len, nq;
  std::string name;
  std::vector<std::string> queries;
  bool ok = r.U32(&name_len) && r.Str(name_len, &name) && r.U32(&nq);
  for (uint32_t i = 0; ok && i < nq; i++) {
    uint32_t ql;
    std::string q;
    ok = r.U32(&ql) && r.Str(ql, &q);
    queries.push_back(std::move(q));
  }
  if (!ok || r.left() != 0) {
    ReplyError(out, kRepErrInvalid, "malformed meta context request");
    return State::kNeedMore;
  }
  if (FindExport(name) < 0) {
    ReplyError(out, kRepErrUnknown, "unknown export");
    return State::kNeedMore;
  }
  bool match = false;
  if (queries.empty()) {
    match = !set;  // LIST with no queries lists everything; SET selects nothing
  } else {
    for (const auto& q : queries) {
      if (q == "base:allocation" || (!set && q == "base:")) match = true;
    }
  }
  if (set) base_allocation_ = match;
  if (match) {
    std::string d;
    Put32(&d, set ? kMetaContextBaseAllocation : 0);
    d += "base:allocation";
    Reply(out, kRepMetaContext, d);
  }
  Reply(out, kRepAck);
  return State::kNeedMore;
}

}  // namespace ubcache::nbd
