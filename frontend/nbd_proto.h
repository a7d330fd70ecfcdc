// SPDX-License-Identifier: Apache-2.0
// NBD wire protocol constants (NetworkBlockDevice/nbd doc/proto.md), and
// the pure parts of the protocol that need no sockets: the request header
// decoder and request validation. Everything is big-endian on the wire.
#pragma once

#include <cstdint>
#include <string>

namespace ubcache::nbd {

// Handshake.
constexpr uint64_t kMagicNbd = 0x4e42444d41474943ull;        // "NBDMAGIC"
constexpr uint64_t kMagicOpt = 0x49484156454F5054ull;        // "IHAVEOPT"
constexpr uint64_t kMagicOptReply = 0x0003e889045565a9ull;
constexpr uint16_t kFlagFixedNewstyle = 1 << 0;
constexpr uint16_t kFlagNoZeroes = 1 << 1;
constexpr uint32_t kClientFixedNewstyle = 1 << 0;
constexpr uint32_t kClientNoZeroes = 1 << 1;

// Options.
constexpr uint32_t kOptExportName = 1;
constexpr uint32_t kOptAbort = 2;
constexpr uint32_t kOptList = 3;
constexpr uint32_t kOptStartTls = 5;
constexpr uint32_t kOptInfo = 6;
constexpr uint32_t kOptGo = 7;
constexpr uint32_t kOptStructuredReply = 8;
constexpr uint32_t kOptListMetaContext = 9;
constexpr uint32_t kOptSetMetaContext = 10;

// Option replies.
constexpr uint32_t kRepAck = 1;
constexpr uint32_t kRepServer = 2;
constexpr uint32_t kRepInfo = 3;
constexpr uint32_t kRepMetaContext = 4;
constexpr uint32_t kRepErrUnsup = 0x80000001;
constexpr uint32_t kRepErrPolicy = 0x80000002;
constexpr uint32_t kRepErrInvalid = 0x80000003;
constexpr uint32_t kRepErrPlatform = 0x80000004;
constexpr uint32_t kRepErrTlsReqd = 0x80000005;
constexpr uint32_t kRepErrUnknown = 0x80000006;
constexpr uint32_t kRepErrShutdown = 0x80000007;
constexpr uint32_t kRepErrTooBig = 0x80000009;

// Info types.
constexpr uint16_t kInfoExport = 0;
constexpr uint16_t kInfoName = 1;
constexpr uint16_t kInfoDescription = 2;
constexpr uint16_t kInfoBlockSize = 3;

// Transmission flags.
constexpr uint16_t kFlagHasFlags = 1 << 0;
constexpr uint16_t kFlagReadOnly = 1 << 1;
constexpr uint16_t kFlagSendFlush = 1 << 2;
constexpr uint16_t kFlagSendFua = 1 << 3;
constexpr uint16_t kFlagRotational = 1 << 4;
constexpr uint16_t kFlagSendTrim = 1 << 5;
constexpr uint16_t kFlagSendWriteZeroes = 1 << 6;
constexpr uint16_t kFlagSendDf = 1 << 7;
constexpr uint16_t kFlagCanMultiConn = 1 << 8;
constexpr uint16_t kFlagSendCache = 1 << 10;
constexpr uint16_t kFlagSendFastZero = 1 << 11;

// Requests and replies.
constexpr uint32_t kRequestMagic = 0x25609513;
constexpr uint32_t kSimpleReplyMagic = 0x67446698;
constexpr uint32_t kStructuredReplyMagic = 0x668e33ef;
constexpr size_t kRequestHeaderSize = 28;
constexpr size_t kSimpleReplySize = 16;
constexpr size_t kStructuredHeaderSize = 20;

enum Cmd : uint16_t {
  kCmdRead = 0,
  kCmdWrite = 1,
  kCmdDisc = 2,
  kCmdFlush = 3,
  kCmdTrim = 4,
  kCmdCache = 5,
  kCmdWriteZeroes = 6,
  kCmdBlockStatus = 7,
};
constexpr uint16_t kCmdFlagFua = 1 << 0;
constexpr uint16_t kCmdFlagNoHole = 1 << 1;
constexpr uint16_t kCmdFlagDf = 1 << 2;
constexpr uint16_t kCmdFlagReqOne = 1 << 3;
constexpr uint16_t kCmdFlagFastZero = 1 << 4;

constexpr uint16_t kReplyFlagDone = 1 << 0;
constexpr uint16_t kReplyTypeNone = 0;
constexpr uint16_t kReplyTypeOffsetData = 1;
constexpr uint16_t kReplyTypeOffsetHole = 2;
constexpr uint16_t kReplyTypeBlockStatus = 5;
constexpr uint16_t kReplyTypeError = (1 << 15) + 1;

// Errors on the wire (Linux values, fixed by the protocol).
constexpr uint32_t kEPERM = 1;
constexpr uint32_t kEIO = 5;
constexpr uint32_t kENOMEM = 12;
constexpr uint32_t kEINVAL = 22;
constexpr uint32_t kENOSPC = 28;
constexpr uint32_t kEOVERFLOW = 75;
constexpr uint32_t kENOTSUP = 95;
constexpr uint32_t kESHUTDOWN = 108;

// Limits this server advertises and enforces.
constexpr uint32_t kMaxPayload = 32u << 20;         // BLOCK_SIZE maximum
constexpr uint32_t kMaxDiscardedPayload = 64u << 20;  // larger oversize writes disconnect
constexpr uint32_t kMaxOptionLength = 64u << 10;     // longer options are refused
constexpr uint32_t kMetaContextBaseAllocation = 1;  // our context id for base:allocation

struct Request {
  uint16_t flags = 0;
  uint16_t type = 0;
  uint64_t cookie = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
};

// Decodes a 28-byte request header; false when the magic is wrong (the
// connection is then beyond repair and must be closed).
bool DecodeRequest(const uint8_t* p, Request* req);

// What a connection knows when it validates a request.
struct ExportLimits {
  uint64_t size;
  uint32_t min_block;  // nonzero: offsets and lengths must be multiples of it
  bool read_only;
  bool structured_replies;
  bool meta_base_allocation;
};

// Does `req` carry a payload to read from the socket (a WRITE)?
inline bool HasPayload(const Request& req) { return req.type == kCmdWrite; }

// 0 if the request may be executed, else the NBD error to reply with.
// Never touches data; the caller still consumes a write's payload.
uint32_t ValidateRequest(const Request& req, const ExportLimits& lim);

const char* CmdName(uint16_t type);

}  // namespace ubcache::nbd
