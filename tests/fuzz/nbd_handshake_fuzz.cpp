// SPDX-License-Identifier: Apache-2.0
// Fuzzes Handshake::Feed with the input as the client's byte stream,
// against a fixed list of two exports. The stream is fed twice: in chunks
// whose sizes (zero included) come from a hash of the input, and whole.
// Checked invariants:
//   - Feed consumes at most what it is given, and all of it unless it
//     returns kDone or kClose; after either, it consumes nothing more and
//     keeps answering the same.
//   - Each call appends only whole messages to `out`: option replies that
//     start with the option-reply magic and whose declared length matches
//     their data (and, for INFO/SERVER/META_CONTEXT, their structure), or
//     the EXPORT_NAME ending for the export chosen.
//   - After kDone export_index() names one of the exports, and a GO ends
//     with an ACK for GO.
//   - Chunking changes nothing: same output, state and bytes consumed.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "frontend/nbd_handshake.h"
#include "frontend/nbd_proto.h"
#include "tests/fuzz/fuzz_check.h"
#include "util/endian.h"

namespace nbd = ubcache::nbd;
using ubcache::LoadBE16;
using ubcache::LoadBE32;
using ubcache::LoadBE64;

namespace {

const std::vector<nbd::ExportInfo>& Exports() {
  static const std::vector<nbd::ExportInfo> exports = {
      {"disk", "the cached disk", 1ull << 30,
       nbd::kFlagHasFlags | nbd::kFlagSendFlush | nbd::kFlagSendFua | nbd::kFlagSendTrim, 512, 4096,
       32u << 20},
      {"ro", "", 12345ull * 4096, nbd::kFlagHasFlags | nbd::kFlagReadOnly, 4096, 65536, 1u << 20},
  };
  return exports;
}

bool IsKnownReply(uint32_t type) {
  switch (type) {
    case nbd::kRepAck: case nbd::kRepServer: case nbd::kRepInfo: case nbd::kRepMetaContext:
    case nbd::kRepErrUnsup: case nbd::kRepErrPolicy: case nbd::kRepErrInvalid:
    case nbd::kRepErrPlatform: case nbd::kRepErrTlsReqd: case nbd::kRepErrUnknown:
    case nbd::kRepErrShutdown: case nbd::kRepErrTooBig:
      return true;
    default:
      return false;
  }
}

// Checks one Feed call's output, `out[from, end)`, message by message.
struct OutputChecker {
  uint32_t last_option = 0;
  uint32_t last_type = 0;
  bool export_name_ending = false;
  bool saw_info_export = false;  // since the last ACK
  uint64_t info_size = 0;
  uint16_t info_flags = 0;

  void Check(const std::string& out, size_t from, nbd::Handshake::State st, int export_index) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(out.data());
    size_t pos = from;
    while (pos < out.size()) {
      const size_t left = out.size() - pos;
      FUZZ_CHECK(!export_name_ending);  // nothing follows the EXPORT_NAME ending
      if (left >= 8 && LoadBE64(p + pos) == nbd::kMagicOptReply) {
        FUZZ_CHECK(left >= 20);
        const uint32_t option = LoadBE32(p + pos + 8);
        const uint32_t type = LoadBE32(p + pos + 12);
        const uint32_t len = LoadBE32(p + pos + 16);
        FUZZ_CHECK(len <= left - 20);
        FUZZ_CHECK(IsKnownReply(type));
        CheckReplyData(option, type, p + pos + 20, len);
        last_option = option;
        last_type = type;
        pos += 20 + len;
        continue;
      }
      // Otherwise it can only be the EXPORT_NAME ending, and only at kDone.
      FUZZ_CHECK(st == nbd::Handshake::State::kDone);
      FUZZ_CHECK(left == 10 || left == 134);
      const nbd::ExportInfo& e = Exports()[export_index];
      FUZZ_CHECK(LoadBE64(p + pos) == e.size && LoadBE16(p + pos + 8) == e.flags);
      for (size_t i = 10; i < left; i++) FUZZ_CHECK(p[pos + i] == 0);
      export_name_ending = true;
      pos += left;
    }
  }

  void CheckReplyData(uint32_t option, uint32_t type, const uint8_t* d, uint32_t len) {
    switch (type) {
      case nbd::kRepAck:
        FUZZ_CHECK(len == 0);
        break;
      case nbd::kRepServer:
        FUZZ_CHECK(option == nbd::kOptList);
        FUZZ_CHECK(len >= 4 && LoadBE32(d) == len - 4);
        break;
      case nbd::kRepInfo: {
        FUZZ_CHECK(option == nbd::kOptInfo || option == nbd::kOptGo);
        FUZZ_CHECK(len >= 2);
        const uint16_t info = LoadBE16(d);
        if (info == nbd::kInfoExport) {
          FUZZ_CHECK(len == 12);
          saw_info_export = true;
          info_size = LoadBE64(d + 2);
          info_flags = LoadBE16(d + 10);
        } else if (info == nbd::kInfoBlockSize) {
          FUZZ_CHECK(len == 14);
          const uint32_t min = LoadBE32(d + 2), pref = LoadBE32(d + 6), max = LoadBE32(d + 10);
          FUZZ_CHECK(min >= 1 && min <= pref && pref <= max);
        } else {
          FUZZ_CHECK(info == nbd::kInfoName || info == nbd::kInfoDescription);
        }
        break;
      }
      case nbd::kRepMetaContext:
        FUZZ_CHECK(option == nbd::kOptListMetaContext || option == nbd::kOptSetMetaContext);
        FUZZ_CHECK(len > 4);
        break;
      default:  // errors carry a message, possibly empty
        break;
    }
    if (type == nbd::kRepAck && option != nbd::kOptGo) saw_info_export = false;
  }

  void CheckDone(const nbd::Handshake& hs) {
    const int idx = hs.export_index();
    FUZZ_CHECK(idx >= 0 && static_cast<size_t>(idx) < Exports().size());
    FUZZ_CHECK(!hs.base_allocation() || hs.structured_replies());
    if (export_name_ending) return;
    // Ended by GO: its last reply is the ACK, after INFO for the chosen export.
    FUZZ_CHECK(last_option == nbd::kOptGo && last_type == nbd::kRepAck);
    FUZZ_CHECK(saw_info_export);
    FUZZ_CHECK(info_size == Exports()[idx].size && info_flags == Exports()[idx].flags);
  }
};

struct Outcome {
  nbd::Handshake::State state = nbd::Handshake::State::kNeedMore;
  size_t consumed = 0;
  std::string out;
  int export_index = -1;
  bool structured = false;
  bool base_allocation = false;
};

// splitmix64: chunk sizes from the input's hash, so the fuzzer explores
// splits by mutating the input and each input replays the same way.
uint64_t Mix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Outcome Run(const uint8_t* data, size_t size, bool chunked) {
  uint64_t seed = 0xcbf29ce484222325ull;  // FNV-1a of the input
  for (size_t i = 0; i < size; i++) seed = (seed ^ data[i]) * 0x100000001b3ull;

  // The TLS policy from the input's hash too; STARTTLS, once acknowledged,
  // is taken as a finished TLS handshake and the stream goes on.
  const auto policy = static_cast<nbd::TlsPolicy>(seed % 3);
  nbd::Handshake hs(&Exports(), policy);
  OutputChecker checker;
  Outcome o;
  size_t pos = 0;
  for (int calls = 0; calls < 100000; calls++) {
    const size_t left = size - pos;
    size_t n = left;
    if (chunked) {
      const uint64_t r = Mix(&seed);
      switch (r % 8) {
        case 0: n = 0; break;
        case 1: n = left; break;
        case 2: n = std::min<size_t>(left, 1 + (r >> 8) % 256); break;
        default: n = std::min<size_t>(left, 1 + (r >> 8) % 20); break;
      }
    }
    // Feed may read exactly [data + pos, + n): a copy lets ASan see overreads.
    std::vector<uint8_t> chunk(data + pos, data + pos + n);
    size_t consumed = SIZE_MAX;
    const size_t before = o.out.size();
    const auto st = hs.Feed(chunk.data(), n, &consumed, &o.out);
    FUZZ_CHECK(consumed <= n);
    if (st == nbd::Handshake::State::kNeedMore) FUZZ_CHECK(consumed == n);  // took everything
    checker.Check(o.out, before, st, hs.export_index());
    o.consumed += consumed;
    o.state = st;
    pos += consumed;
    if (st == nbd::Handshake::State::kStartTls) {
      FUZZ_CHECK(policy != nbd::TlsPolicy::kOff && !hs.tls());
      hs.TlsStarted();
      continue;
    }
    // Under "require" nothing is served, or listed, before TLS.
    if (policy == nbd::TlsPolicy::kRequire && !hs.tls()) {
      FUZZ_CHECK(st != nbd::Handshake::State::kDone);
      FUZZ_CHECK(o.out.find("the cached disk") == std::string::npos);  // no export info
    }
    if (st != nbd::Handshake::State::kNeedMore) {
      if (st == nbd::Handshake::State::kDone) checker.CheckDone(hs);
      else FUZZ_CHECK(!hs.close_reason().empty());
      // Finished: the rest of the stream, and nothing, leave it untouched.
      std::vector<uint8_t> rest(data + pos, data + size);
      const size_t b = o.out.size();
      size_t c = SIZE_MAX;
      FUZZ_CHECK(hs.Feed(rest.data(), rest.size(), &c, &o.out) == st && c == 0);
      c = SIZE_MAX;
      FUZZ_CHECK(hs.Feed(nullptr, 0, &c, &o.out) == st && c == 0);
      FUZZ_CHECK(o.out.size() == b);
      break;
    }
    if (pos == size) break;  // exhausted, still wanting more
  }
  o.export_index = hs.export_index();
  if (o.state == nbd::Handshake::State::kDone) {
    o.structured = hs.structured_replies();
    o.base_allocation = hs.base_allocation();
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string greeting;
  nbd::Handshake::Greeting(&greeting);
  FUZZ_CHECK(greeting.size() == 18);

  const Outcome chunked = Run(data, size, true);
  const Outcome whole = Run(data, size, false);
  FUZZ_CHECK(chunked.state == whole.state);
  FUZZ_CHECK(chunked.consumed == whole.consumed);
  FUZZ_CHECK(chunked.out == whole.out);
  FUZZ_CHECK(chunked.export_index == whole.export_index);
  FUZZ_CHECK(chunked.structured == whole.structured);
  FUZZ_CHECK(chunked.base_allocation == whole.base_allocation);
  if (chunked.state != nbd::Handshake::State::kNeedMore) FUZZ_CHECK(chunked.consumed <= size);
  else FUZZ_CHECK(chunked.consumed == size);
  return 0;
}
