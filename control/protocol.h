// SPDX-License-Identifier: Apache-2.0
// The control protocol (doc/control.md is its reference): a request is one
// line of space-separated tokens,
//     ubcache-ctl/1 [device=NAME] [format=json] COMMAND [ARG...]\n
// at most kMaxRequestBytes long; the reply is one or more frames
//     ok|error|progress LEN\n<LEN bytes>
// of which the last is ok or error. Also here: the one table of commands
// (the client checks usage against it, the server dispatches on it), and
// the small HTTP request parser of the metrics listener.
//
// Everything here is pure (no I/O), so the fuzzer drives it directly.
// Thread safety: free functions are reentrant; a LineReader/FrameReader
// belongs to one connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace ubcache::control {

inline constexpr std::string_view kProtocolVersion = "ubcache-ctl/1";
inline constexpr size_t kMaxRequestBytes = 4096;  // including the newline
inline constexpr size_t kMaxTokens = 16;
inline constexpr size_t kMaxFrameBytes = 16 << 20;

struct CommandSpec {
  const char* name;
  unsigned min_args, max_args;
  const char* args;  // for usage: "NAME VALUE"
  const char* help;
};
const std::vector<CommandSpec>& Commands();
const CommandSpec* FindCommand(std::string_view name);

struct Request {
  std::string device;  // empty: the first export
  bool json = false;
  std::string command;
  std::vector<std::string> args;
};

// The request line, newline included. Tokens must be valid (IsToken).
std::string EncodeRequest(const Request& r);
// `line` without its newline. Errors name what is wrong: version, empty,
// bad token, too many tokens, unknown command, argument count.
Result<Request> ParseRequest(std::string_view line);
// 1..255 bytes of printable ASCII other than space.
bool IsToken(std::string_view s);

// Splits a byte stream into lines of at most kMaxRequestBytes.
class LineReader {
 public:
  enum class Next { kNeedMore, kLine, kTooLong };
  void Feed(const char* data, size_t n) { buf_.append(data, n); }
  // kLine: *line is the next line, without its newline. kTooLong: the
  // stream is unusable (a line ran past the limit); close the connection.
  Next Pop(std::string* line);
  size_t buffered() const { return buf_.size(); }

 private:
  std::string buf_;
  size_t scanned_ = 0;  // bytes of buf_ known to hold no newline
};

enum class FrameKind { kOk, kError, kProgress };
std::string EncodeFrame(FrameKind kind, std::string_view body);

struct Frame {
  FrameKind kind;
  std::string body;
};
class FrameReader {
 public:
  void Feed(const char* data, size_t n) { buf_.append(data, n); }
  // A frame, nullopt when more bytes are needed, or an error for a stream
  // that is not this protocol.
  Result<std::optional<Frame>> Pop();

 private:
  std::string buf_;
};

// The metrics listener's HTTP/1.x request head: "GET /metrics HTTP/1.1\r\n
// headers\r\n\r\n". kBad for anything malformed or longer than kMaxHttpHead.
inline constexpr size_t kMaxHttpHead = 8192;
struct HttpRequest {
  std::string method, target;
};
enum class HttpParse { kNeedMore, kDone, kBad };
HttpParse ParseHttpRequest(std::string_view head, HttpRequest* out);

}  // namespace ubcache::control
