// SPDX-License-Identifier: Apache-2.0
#include "util/size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ubcache {

namespace {

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument("bad size '" + std::string(text) + "': " + why);
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) i++;
  uint64_t whole = 0;
  size_t digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    uint64_t d = text[i] - '0';
    if (whole > (std::numeric_limits<uint64_t>::max() - d) / 10) return bad("too large");
    whole = whole * 10 + d;
    i++;
    digits++;
  }
  double frac = 0;
  size_t frac_digits = 0;
  if (i < text.size() && text[i] == '.') {
    i++;
    double scale = 0.1;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      frac += (text[i] - '0') * scale;
      scale /= 10;
      i++;
      frac_digits++;
    }
    if (frac_digits == 0) return bad("expected digits after '.'");
  }
  if (digits == 0) return bad("expected a number");
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) i++;
  std::string_view unit = text.substr(i);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back())))
    unit.remove_suffix(1);

  unsigned shift;
  if (unit.empty() || EqualsNoCase(unit, "b")) {
    shift = 0;
  } else {
    char u = static_cast<char>(std::tolower(static_cast<unsigned char>(unit[0])));
    std::string_view rest = unit.substr(1);
    if (!(rest.empty() || EqualsNoCase(rest, "b") || EqualsNoCase(rest, "ib")))
      return bad("unknown unit");
    switch (u) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      case 't': shift = 40; break;
      case 'p': shift = 50; break;
      default: return bad("unknown unit");
    }
  }
  if (shift > 0 && whole > (std::numeric_limits<uint64_t>::max() >> shift)) return bad("too large");
  uint64_t bytes = whole << shift;
  if (frac_digits > 0) {
    if (shift == 0) return bad("fractional bytes");
    double extra = std::round(frac * static_cast<double>(uint64_t{1} << shift));
    if (bytes > std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(extra))
      return bad("too large");
    bytes += static_cast<uint64_t>(extra);
  }
  return bytes;
}

std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    u++;
  }
  char buf[32];
  if (v >= 100 || v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  else if (v >= 10)
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

Result<uint64_t> ParseUint(std::string_view text, uint64_t min, uint64_t max,
                           std::string_view what) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string(what) + ": '" + std::string(text) + "' " + why);
  };
  if (text.empty()) return bad("is empty");
  uint64_t v = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad("is not a number");
    uint64_t d = c - '0';
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return bad("is too large");
    v = v * 10 + d;
  }
  if (v < min || v > max)
    return bad("is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

}  // namespace ubcache
