// SPDX-License-Identifier: Apache-2.0
// Fuzzes the control socket's parsers: the byte stream is cut into chunks
// (sizes from the input's first byte) and fed to a LineReader, every line
// to ParseRequest, and the whole input to ParseHttpRequest and a
// FrameReader. Invariants: a line never exceeds the limit; a parsed request
// has a known command with an allowed argument count and re-encodes to a
// line that parses to the same request. Any violation aborts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "control/protocol.h"
#include "tests/fuzz/fuzz_check.h"

namespace control = ubcache::control;

namespace {

void CheckRequest(const std::string& line) {
  FUZZ_CHECK(line.size() < control::kMaxRequestBytes);
  auto r = control::ParseRequest(line);
  if (!r.ok()) return;
  const control::CommandSpec* c = control::FindCommand(r->command);
  FUZZ_CHECK(c != nullptr);
  FUZZ_CHECK(r->args.size() >= c->min_args && r->args.size() <= c->max_args);
  for (const auto& a : r->args) FUZZ_CHECK(control::IsToken(a));
  std::string again = control::EncodeRequest(*r);
  FUZZ_CHECK(!again.empty() && again.back() == '\n');
  auto r2 = control::ParseRequest(std::string_view(again).substr(0, again.size() - 1));
  FUZZ_CHECK(r2.ok());
  FUZZ_CHECK(r2->device == r->device && r2->json == r->json && r2->command == r->command && r2->args == r->args);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 64;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);

  control::LineReader lr;
  std::string line;
  bool dead = false;
  for (size_t off = 0; off < in.size() && !dead; off += chunk) {
    std::string_view part = in.substr(off, chunk);
    lr.Feed(part.data(), part.size());
    for (;;) {
      auto next = lr.Pop(&line);
      if (next == control::LineReader::Next::kNeedMore) break;
      if (next == control::LineReader::Next::kTooLong) {
        dead = true;  // the server closes the connection here
        break;
      }
      CheckRequest(line);
    }
    FUZZ_CHECK(dead || lr.buffered() < control::kMaxRequestBytes + chunk);
  }

  control::HttpRequest http;
  if (control::ParseHttpRequest(in, &http) == control::HttpParse::kDone) {
    FUZZ_CHECK(!http.method.empty() && !http.target.empty());
  }

  control::FrameReader fr;
  fr.Feed(in.data(), in.size());
  for (int i = 0; i < 64; i++) {
    auto f = fr.Pop();
    if (!f.ok() || !*f) break;
    FUZZ_CHECK((*f)->body.size() <= control::kMaxFrameBytes);
  }
  return 0;
}
