// SPDX-License-Identifier: Apache-2.0
// Fuzzes DecodeRequest + ValidateRequest: the first 28 bytes are a request
// header, the rest derive ExportLimits variants. ValidateRequest's answer
// is checked against an independent statement of what may run: if it says
// 0, the request is a known command with only its allowed flags, in range
// without overflow, aligned, within the payload limit and not a write to a
// read-only export. Any violation aborts, which libFuzzer reports.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "frontend/nbd_proto.h"
#include "tests/fuzz/fuzz_check.h"
#include "util/endian.h"

namespace nbd = ubcache::nbd;

namespace {

// The spec's flags per command (NetworkBlockDevice/nbd doc/proto.md),
// restricted to what this server advertises.
bool KnownCommand(uint16_t type, uint16_t* allowed, bool* writes) {
  *writes = false;
  switch (type) {
    case nbd::kCmdRead: *allowed = nbd::kCmdFlagDf; return true;
    case nbd::kCmdWrite: *allowed = nbd::kCmdFlagFua; *writes = true; return true;
    case nbd::kCmdFlush: *allowed = 0; return true;
    case nbd::kCmdTrim: *allowed = nbd::kCmdFlagFua; *writes = true; return true;
    case nbd::kCmdCache: *allowed = 0; return true;
    case nbd::kCmdWriteZeroes:
      *allowed = nbd::kCmdFlagFua | nbd::kCmdFlagNoHole | nbd::kCmdFlagFastZero;
      *writes = true;
      return true;
    case nbd::kCmdBlockStatus: *allowed = nbd::kCmdFlagReqOne; return true;
    default: return false;  // DISC is the connection's business, never validated
  }
}

void Check(const nbd::Request& req, const nbd::ExportLimits& lim) {
  const uint32_t err = nbd::ValidateRequest(req, lim);
  if (err != 0) {
    FUZZ_CHECK(err == nbd::kEINVAL || err == nbd::kEPERM || err == nbd::kENOSPC ||
               err == nbd::kEOVERFLOW);
    if (err == nbd::kEOVERFLOW)
      FUZZ_CHECK(req.type == nbd::kCmdRead && lim.structured_replies && req.length > nbd::kMaxPayload);
    if (err == nbd::kEPERM) FUZZ_CHECK(lim.read_only);
    return;
  }
  uint16_t allowed;
  bool writes;
  FUZZ_CHECK(KnownCommand(req.type, &allowed, &writes));
  FUZZ_CHECK((req.flags & ~allowed) == 0);
  if (req.flags & nbd::kCmdFlagDf) FUZZ_CHECK(lim.structured_replies);
  if (req.type == nbd::kCmdBlockStatus) FUZZ_CHECK(lim.meta_base_allocation);
  FUZZ_CHECK(!(writes && lim.read_only));
  if (req.type == nbd::kCmdFlush) {
    FUZZ_CHECK(req.offset == 0 && req.length == 0);
    return;
  }
  uint64_t end;
  FUZZ_CHECK(!__builtin_add_overflow(req.offset, uint64_t{req.length}, &end));
  FUZZ_CHECK(end <= lim.size);
  FUZZ_CHECK(req.length > 0);
  FUZZ_CHECK(req.offset % lim.min_block == 0 && req.length % lim.min_block == 0);
  if (req.type == nbd::kCmdRead || req.type == nbd::kCmdWrite)
    FUZZ_CHECK(req.length <= nbd::kMaxPayload);
  // The connection allocates and does I/O from these without further checks.
  if (nbd::HasPayload(req)) FUZZ_CHECK(req.type == nbd::kCmdWrite);
}

// Sizes that sit on the request's boundaries, where off-by-ones live.
std::vector<uint64_t> EdgeSizes(const nbd::Request& req) {
  const uint64_t end = req.offset + req.length;  // may wrap: that is a case too
  return {0, 1, 512, 4096, uint64_t{1} << 30, UINT64_MAX, UINT64_MAX - 511,
          req.offset, end, end - 1, end + 1, req.length, req.offset - 1};
}

// Reads bytes from the tail of the input; zeros once it runs out.
class Bytes {
 public:
  Bytes(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool empty() const { return n_ == 0; }
  uint64_t Take(size_t k) {
    uint64_t v = 0;
    for (size_t i = 0; i < k; i++) {
      v = v << 8 | (n_ ? *p_ : 0);
      if (n_) p_++, n_--;
    }
    return v;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < nbd::kRequestHeaderSize) return 0;
  uint8_t hdr[nbd::kRequestHeaderSize];
  std::memcpy(hdr, data, sizeof hdr);

  nbd::Request req;
  const bool magic_ok = ubcache::LoadBE32(hdr) == nbd::kRequestMagic;
  FUZZ_CHECK(nbd::DecodeRequest(hdr, &req) == magic_ok);
  // Past a bad magic there is nothing to validate; fuzz the rest anyway.
  ubcache::StoreBE32(hdr, nbd::kRequestMagic);
  FUZZ_CHECK(nbd::DecodeRequest(hdr, &req));
  FUZZ_CHECK(req.flags == ubcache::LoadBE16(hdr + 4) && req.type == ubcache::LoadBE16(hdr + 6) &&
             req.cookie == ubcache::LoadBE64(hdr + 8) && req.offset == ubcache::LoadBE64(hdr + 16) &&
             req.length == ubcache::LoadBE32(hdr + 24));
  (void)nbd::CmdName(req.type);

  // Every boundary size with every flag combination and a few block sizes.
  for (uint64_t sz : EdgeSizes(req))
    for (uint32_t min_block : {1u, 512u, 4096u})
      for (int bits = 0; bits < 8; bits++)
        Check(req, nbd::ExportLimits{sz, min_block, (bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0});

  // Then limits taken from the input: 10 bytes per variant.
  Bytes rest(data + nbd::kRequestHeaderSize, size - nbd::kRequestHeaderSize);
  for (int i = 0; i < 64 && !rest.empty(); i++) {
    nbd::ExportLimits lim{};
    lim.size = rest.Take(8);
    const uint8_t b = static_cast<uint8_t>(rest.Take(1));
    const uint8_t m = static_cast<uint8_t>(rest.Take(1));
    // min_block is a power of two up to 64 KiB, or (rarely) any nonzero value.
    lim.min_block = (b & 0x80) ? 1u + m : 1u << (m % 17);
    lim.read_only = b & 1;
    lim.structured_replies = b & 2;
    lim.meta_base_allocation = b & 4;
    // Bit 3: size relative to the request's end, to land next to it.
    if (b & 8) lim.size = req.offset + req.length + static_cast<int8_t>(lim.size & 0xff);
    Check(req, lim);
  }
  return 0;
}
