// SPDX-License-Identifier: Apache-2.0
// The control protocol: request lines, reply frames, the HTTP request head.
#include "control/protocol.h"

#include <catch2/catch.hpp>

using namespace ubcache::control;

TEST_CASE("a request survives encode and parse with its device, format and arguments") {
  Request r;
  r.device = "disk1";
  r.json = true;
  r.command = "set";
  r.args = {"sequential_cutoff", "4M"};
  std::string line = EncodeRequest(r);
  REQUIRE(line == "ubcache-ctl/1 device=disk1 format=json set sequential_cutoff 4M\n");
  auto p = ParseRequest(line.substr(0, line.size() - 1));
  REQUIRE(p.ok());
  CHECK(p->device == "disk1");
  CHECK(p->json);
  CHECK(p->command == "set");
  CHECK(p->args == r.args);
}

TEST_CASE("malformed requests are refused with a reason") {
  CHECK(ParseRequest("").status().message() == "request: empty");
  CHECK(ParseRequest("ubcache-ctl/2 show").status().IsNotSupported());
  CHECK(ParseRequest("ubcache-ctl/1").status().message() == "request: no command");
  CHECK(ParseRequest("ubcache-ctl/1 frobnicate").status().message() == "unknown command 'frobnicate'");
  CHECK(ParseRequest("ubcache-ctl/1 get").status().message() == "usage: get NAME");
  CHECK(ParseRequest("ubcache-ctl/1 set a b c").status().message() == "usage: set NAME VALUE");
  CHECK(!ParseRequest(std::string("ubcache-ctl/1 get a\x01")).ok());
  CHECK(!ParseRequest("ubcache-ctl/1 show " + std::string(300, 'x')).ok());
  CHECK(!ParseRequest("ubcache-ctl/1 show a b c d e f g h i j k l m n o p q").ok());
  CHECK(ParseRequest("ubcache-ctl/1   show\r").ok());  // extra spaces, CRLF
}

TEST_CASE("the line reader splits a stream and refuses a line past 4096 bytes") {
  LineReader lr;
  std::string line;
  lr.Feed("ubcache-ctl/1 sh", 16);
  CHECK(lr.Pop(&line) == LineReader::Next::kNeedMore);
  lr.Feed("ow\nubcache-ctl/1 metrics\n", 25);
  REQUIRE(lr.Pop(&line) == LineReader::Next::kLine);
  CHECK(line == "ubcache-ctl/1 show");
  REQUIRE(lr.Pop(&line) == LineReader::Next::kLine);
  CHECK(line == "ubcache-ctl/1 metrics");
  CHECK(lr.Pop(&line) == LineReader::Next::kNeedMore);
  std::string big(kMaxRequestBytes, 'x');
  lr.Feed(big.data(), big.size());
  CHECK(lr.Pop(&line) == LineReader::Next::kTooLong);
}

TEST_CASE("frames decode across arbitrary splits and bad headers are errors") {
  std::string stream = EncodeFrame(FrameKind::kProgress, "1 MiB left") + EncodeFrame(FrameKind::kOk, "done\n");
  FrameReader fr;
  std::vector<Frame> got;
  for (char c : stream) {
    fr.Feed(&c, 1);
    auto f = fr.Pop();
    REQUIRE(f.ok());
    if (*f) got.push_back(**f);
  }
  REQUIRE(got.size() == 2);
  CHECK(got[0].kind == FrameKind::kProgress);
  CHECK(got[0].body == "1 MiB left");
  CHECK(got[1].kind == FrameKind::kOk);
  CHECK(got[1].body == "done\n");
  FrameReader bad;
  bad.Feed("hello 3\nabc", 11);
  CHECK(!bad.Pop().ok());
  FrameReader huge;
  huge.Feed("ok 99999999999\n", 15);
  CHECK(!huge.Pop().ok());
}

TEST_CASE("the HTTP head parser takes GET /metrics and refuses garbage") {
  HttpRequest r;
  CHECK(ParseHttpRequest("GET /metrics HTTP/1.1\r\nHost: x\r\n", &r) == HttpParse::kNeedMore);
  REQUIRE(ParseHttpRequest("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &r) == HttpParse::kDone);
  CHECK(r.method == "GET");
  CHECK(r.target == "/metrics");
  CHECK(ParseHttpRequest("GET /metrics SPDY/3\r\n\r\n", &r) == HttpParse::kBad);
  CHECK(ParseHttpRequest("get /metrics HTTP/1.1\r\n\r\n", &r) == HttpParse::kBad);
  CHECK(ParseHttpRequest(std::string(kMaxHttpHead + 1, 'G'), &r) == HttpParse::kBad);
}
