// SPDX-License-Identifier: Apache-2.0
#include "control/protocol.h"

#include <charconv>

namespace ubcache::control {

const std::vector<CommandSpec>& Commands() {
  static const std::vector<CommandSpec> kCommands = {
      {"show", 0, 0, "", "every attribute with its value, grouped like bcache's sysfs"},
      {"get", 1, 1, "NAME", "one attribute's value"},
      {"set", 2, 2, "NAME VALUE", "change a knob; takes effect on the next request"},
      {"stats", 0, 1, "[GROUP]", "statistics: stats_total, stats_five_minute, stats_hour, stats_day, or any group"},
      {"priority-stats", 0, 0, "", "bucket usage and 31 quantiles of bucket age, as bcache's priority_stats"},
      {"dirty-data", 0, 0, "", "bytes in the cache not yet written back"},
      {"writeback-rate-debug", 0, 0, "", "the writeback rate controller, as bcache's writeback_rate_debug"},
      {"clear-stats", 0, 0, "", "zero the statistics of the device"},
      {"trigger-gc", 0, 0, "", "run garbage collection now"},
      {"flush", 0, 0, "", "write back all dirty data, with progress"},
      {"detach", 0, 0, "", "flush, then serve the device without the cache"},
      {"attach", 1, 1, "CACHE", "serve the device through the daemon's cache set again"},
      {"resize", 0, 0, "", "grow the device to its backing device's size now (shrinking is refused)"},
      {"metrics", 0, 0, "", "Prometheus text exposition of every statistic and knob"},
      {"devices", 0, 0, "", "the daemon's exports, one per line (ubcache status)"},
      {"stop", 0, 1, "[delete]", "stop the daemon as SIGTERM does; with delete its ublk devices go too (ubcache stop)"},
  };
  return kCommands;
}

const CommandSpec* FindCommand(std::string_view name) {
  for (const CommandSpec& c : Commands())
    if (name == c.name) return &c;
  return nullptr;
}

bool IsToken(std::string_view s) {
  if (s.empty() || s.size() > 255) return false;
  for (char c : s)
    if (c <= ' ' || c > '~') return false;
  return true;
}

std::string EncodeRequest(const Request& r) {
  std::string line(kProtocolVersion);
  if (!r.device.empty()) line += " device=" + r.device;
  if (r.json) line += " format=json";
  line += " " + r.command;
  for (const auto& a : r.args) line += " " + a;
  return line + "\n";
}

Result<Request> ParseRequest(std::string_view line) {
  if (line.size() >= kMaxRequestBytes) return Status::InvalidArgument("request longer than 4096 bytes");
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::vector<std::string_view> tokens;
  size_t pos = 0;
  while (pos <= line.size()) {
    size_t sp = line.find(' ', pos);
    if (sp == std::string_view::npos) sp = line.size();
    std::string_view tok = line.substr(pos, sp - pos);
    if (!tok.empty()) {
      if (!IsToken(tok)) return Status::InvalidArgument("request: bad token (printable ASCII, 1-255 bytes)");
      if (tokens.size() == kMaxTokens) return Status::InvalidArgument("request: too many tokens");
      tokens.push_back(tok);
    }
    pos = sp + 1;
  }
  if (tokens.empty()) return Status::InvalidArgument("request: empty");
  if (tokens[0] != kProtocolVersion)
    return Status::NotSupported("request: protocol '" + std::string(tokens[0]) + "' (this daemon speaks " +
                                std::string(kProtocolVersion) + ")");
  Request r;
  size_t i = 1;
  for (; i < tokens.size(); i++) {
    std::string_view t = tokens[i];
    if (t.substr(0, 7) == "device=" && t.size() > 7) {
      r.device = std::string(t.substr(7));
    } else if (t == "format=json") {
      r.json = true;
    } else if (t == "format=text") {
      r.json = false;
    } else {
      break;
    }
  }
  if (i == tokens.size()) return Status::InvalidArgument("request: no command");
  const CommandSpec* c = FindCommand(tokens[i]);
  if (!c) return Status::InvalidArgument("unknown command '" + std::string(tokens[i]) + "'");
  r.command = c->name;
  for (i++; i < tokens.size(); i++) r.args.emplace_back(tokens[i]);
  if (r.args.size() < c->min_args || r.args.size() > c->max_args)
    return Status::InvalidArgument(std::string("usage: ") + c->name + (*c->args ? " " : "") + c->args);
  return r;
}

LineReader::Next LineReader::Pop(std::string* line) {
  size_t nl = buf_.find('\n', scanned_);
  if (nl == std::string::npos) {
    scanned_ = buf_.size();
    return buf_.size() >= kMaxRequestBytes ? Next::kTooLong : Next::kNeedMore;
  }
  if (nl + 1 > kMaxRequestBytes) return Next::kTooLong;
  line->assign(buf_, 0, nl);
  buf_.erase(0, nl + 1);
  scanned_ = 0;
  return Next::kLine;
}

namespace {

const char* FrameName(FrameKind k) {
  switch (k) {
    case FrameKind::kOk: return "ok";
    case FrameKind::kError: return "error";
    case FrameKind::kProgress: return "progress";
  }
  return "?";
}

}  // namespace

std::string EncodeFrame(FrameKind kind, std::string_view body) {
  std::string f = std::string(FrameName(kind)) + " " + std::to_string(body.size()) + "\n";
  f.append(body);
  return f;
}

Result<std::optional<Frame>> FrameReader::Pop() {
  size_t nl = buf_.find('\n');
  if (nl == std::string::npos) {
    if (buf_.size() > 32) return Status::Corruption("reply: no frame header");
    return std::optional<Frame>();
  }
  std::string_view head(buf_.data(), nl);
  size_t sp = head.find(' ');
  if (sp == std::string_view::npos) return Status::Corruption("reply: bad frame header");
  std::string_view kind = head.substr(0, sp), len_text = head.substr(sp + 1);
  Frame f;
  if (kind == "ok")
    f.kind = FrameKind::kOk;
  else if (kind == "error")
    f.kind = FrameKind::kError;
  else if (kind == "progress")
    f.kind = FrameKind::kProgress;
  else
    return Status::Corruption("reply: unknown frame kind");
  size_t len = 0;
  auto [end, ec] = std::from_chars(len_text.data(), len_text.data() + len_text.size(), len);
  if (ec != std::errc() || end != len_text.data() + len_text.size() || len > kMaxFrameBytes)
    return Status::Corruption("reply: bad frame length");
  if (buf_.size() < nl + 1 + len) return std::optional<Frame>();
  f.body.assign(buf_, nl + 1, len);
  buf_.erase(0, nl + 1 + len);
  return std::optional<Frame>(std::move(f));
}

HttpParse ParseHttpRequest(std::string_view head, HttpRequest* out) {
  size_t end = head.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    // Some clients end lines with a bare LF.
    end = head.find("\n\n");
    if (end == std::string_view::npos) return head.size() > kMaxHttpHead ? HttpParse::kBad : HttpParse::kNeedMore;
  }
  if (end > kMaxHttpHead) return HttpParse::kBad;
  size_t eol = head.find('\n');
  std::string_view line = head.substr(0, eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  size_t s1 = line.find(' ');
  if (s1 == std::string_view::npos || s1 == 0) return HttpParse::kBad;
  size_t s2 = line.find(' ', s1 + 1);
  if (s2 == std::string_view::npos || s2 == s1 + 1) return HttpParse::kBad;
  std::string_view method = line.substr(0, s1), target = line.substr(s1 + 1, s2 - s1 - 1),
                   version = line.substr(s2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return HttpParse::kBad;
  for (char c : method)
    if (c < 'A' || c > 'Z') return HttpParse::kBad;
  for (char c : target)
    if (c <= ' ' || c > '~') return HttpParse::kBad;
  out->method = std::string(method);
  out->target = std::string(target);
  return HttpParse::kDone;
}

}  // namespace ubcache::control
