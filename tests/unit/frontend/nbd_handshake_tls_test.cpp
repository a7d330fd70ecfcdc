// SPDX-License-Identifier: Apache-2.0
// The handshake's TLS policies (off, on, require), driven by a client that
// encodes options by hand: what is answered before STARTTLS, the switch
// itself, plaintext injected after it, and haggling starting over in TLS.
#include "frontend/nbd_handshake.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "frontend/nbd_proto.h"
#include "util/endian.h"

using namespace ubcache;
using namespace ubcache::nbd;

namespace {

void Be32(std::string* s, uint32_t v) {
  for (int i = 3; i >= 0; i--) s->push_back(static_cast<char>(v >> (8 * i)));
}
void Be64(std::string* s, uint64_t v) {
  Be32(s, static_cast<uint32_t>(v >> 32));
  Be32(s, static_cast<uint32_t>(v));
}
std::string Option(uint32_t opt, const std::string& data = "") {
  std::string s;
  Be64(&s, kMagicOpt);
  Be32(&s, opt);
  Be32(&s, static_cast<uint32_t>(data.size()));
  return s + data;
}
std::string GoDefault() {
  std::string d;
  Be32(&d, 0);  // name ""
  d += std::string(2, '\0');  // no info requests
  return Option(kOptGo, d);
}

struct Reply {
  uint32_t opt, type;
  std::string data;
};
std::vector<Reply> Replies(const std::string& out) {
  std::vector<Reply> r;
  size_t p = 0;
  while (p + 20 <= out.size()) {
    const auto* b = reinterpret_cast<const uint8_t*>(out.data() + p);
    REQUIRE(LoadBE64(b) == kMagicOptReply);
    uint32_t len = LoadBE32(b + 16);
    r.push_back({LoadBE32(b + 8), LoadBE32(b + 12), out.substr(p + 20, len)});
    p += 20 + len;
  }
  REQUIRE(p == out.size());
  return r;
}

struct Client {
  std::vector<ExportInfo> exports{{"secret-disk", "", 1 << 20, kFlagHasFlags}};
  Handshake hs;
  std::string out;
  explicit Client(TlsPolicy p) : hs(&exports, p) {
    std::string flags;
    Be32(&flags, kClientFixedNewstyle | kClientNoZeroes);
    REQUIRE(Send(flags) == Handshake::State::kNeedMore);
  }
  Handshake::State Send(const std::string& bytes) {
    size_t consumed = 0;
    out.clear();
    auto st = hs.Feed(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &consumed, &out);
    if (st != Handshake::State::kClose) CHECK(consumed == bytes.size());
    return st;
  }
};

}  // namespace

TEST_CASE("TLS off: STARTTLS is unsupported and the rest works in plaintext") {
  Client c(TlsPolicy::kOff);
  CHECK(c.Send(Option(kOptStartTls)) == Handshake::State::kNeedMore);
  CHECK(Replies(c.out).at(0).type == kRepErrUnsup);
  CHECK(c.Send(Option(kOptList)) == Handshake::State::kNeedMore);
  CHECK(c.out.find("secret-disk") != std::string::npos);
  CHECK(c.Send(GoDefault()) == Handshake::State::kDone);
}

TEST_CASE("TLS required: nothing but STARTTLS is answered before TLS") {
  Client c(TlsPolicy::kRequire);
  for (uint32_t opt : {kOptList, kOptStructuredReply, kOptInfo, kOptGo, kOptListMetaContext, 77u}) {
    INFO("option " << opt);
    std::string data = (opt == kOptInfo || opt == kOptGo) ? GoDefault().substr(16) : "";
    CHECK(c.Send(Option(opt, data)) == Handshake::State::kNeedMore);
    auto r = Replies(c.out);
    REQUIRE(r.size() == 1);
    CHECK(r[0].type == kRepErrTlsReqd);
    CHECK(c.out.find("secret-disk") == std::string::npos);  // not even the export list
  }
  CHECK(c.Send(Option(kOptStartTls)) == Handshake::State::kStartTls);
  CHECK(Replies(c.out).at(0).type == kRepAck);
  c.hs.TlsStarted();
  CHECK(c.hs.tls());
  CHECK(c.Send(Option(kOptList)) == Handshake::State::kNeedMore);
  CHECK(c.out.find("secret-disk") != std::string::npos);
  CHECK(c.Send(Option(kOptStartTls)) == Handshake::State::kNeedMore);
  CHECK(Replies(c.out).at(0).type == kRepErrInvalid);  // already in TLS
  CHECK(c.Send(GoDefault()) == Handshake::State::kDone);
}

TEST_CASE("TLS required: EXPORT_NAME before STARTTLS closes (it has no error reply)") {
  Client c(TlsPolicy::kRequire);
  CHECK(c.Send(Option(kOptExportName, "secret-disk")) == Handshake::State::kClose);
  CHECK(c.out.empty());
  CHECK_THAT(c.hs.close_reason(), Catch::Contains("TLS is required"));
}

TEST_CASE("TLS on: plaintext bytes after STARTTLS close the connection") {
  Client c(TlsPolicy::kOn);
  CHECK(c.Send(Option(kOptList)) == Handshake::State::kNeedMore);  // plaintext allowed
  // STARTTLS with a GO pipelined behind it: the GO is an injection.
  size_t consumed = 0;
  std::string bytes = Option(kOptStartTls) + GoDefault(), out;
  auto st = c.hs.Feed(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &consumed, &out);
  CHECK(st == Handshake::State::kStartTls);
  CHECK(consumed == Option(kOptStartTls).size());
  CHECK(c.Send(GoDefault()) == Handshake::State::kClose);
  CHECK_THAT(c.hs.close_reason(), Catch::Contains("after STARTTLS"));
}

TEST_CASE("what was negotiated before STARTTLS is forgotten after it") {
  Client c(TlsPolicy::kOn);
  CHECK(c.Send(Option(kOptStructuredReply)) == Handshake::State::kNeedMore);
  CHECK(Replies(c.out).at(0).type == kRepAck);
  CHECK(c.Send(Option(kOptStartTls)) == Handshake::State::kStartTls);
  c.hs.TlsStarted();
  CHECK(c.Send(GoDefault()) == Handshake::State::kDone);
  CHECK_FALSE(c.hs.structured_replies());
}
