// SPDX-License-Identifier: Apache-2.0
#include "frontend/nbd_proto.h"

#include "util/endian.h"

namespace ubcache::nbd {

bool DecodeRequest(const uint8_t* p, Request* req) {
  if (LoadBE32(p) != kRequestMagic) return false;
  req->flags = LoadBE16(p + 4);
  req->type = LoadBE16(p + 6);
  req->cookie = LoadBE64(p + 8);
  req->offset = LoadBE64(p + 16);
  req->length = LoadBE32(p + 24);
  return true;
}

const char* CmdName(uint16_t type) {
  switch (type) {
    case kCmdRead: return "READ";
    case kCmdWrite: return "WRITE";
    case kCmdDisc: return "DISC";
    case kCmdFlush: return "FLUSH";
    case kCmdTrim: return "TRIM";
    case kCmdCache: return "CACHE";
    case kCmdWriteZeroes: return "WRITE_ZEROES";
    case kCmdBlockStatus: return "BLOCK_STATUS";
    default: return "UNKNOWN";
  }
}

uint32_t ValidateRequest(const Request& req, const ExportLimits& lim) {
  uint16_t allowed_flags;
  bool writes = false;
  bool ranged = true;
  switch (req.type) {
    case kCmdRead:
      allowed_flags = kCmdFlagDf;
      break;
    case kCmdWrite:
      allowed_flags = kCmdFlagFua;
      writes = true;
      break;
    case kCmdFlush:
      allowed_flags = 0;
      ranged = false;
      break;
    case kCmdTrim:
      allowed_flags = kCmdFlagFua;
      writes = true;
      break;
    case kCmdCache:
      allowed_flags = 0;
      break;
    case kCmdWriteZeroes:
      allowed_flags = kCmdFlagFua | kCmdFlagNoHole | kCmdFlagFastZero;
      writes = true;
      break;
    case kCmdBlockStatus:
      allowed_flags = kCmdFlagReqOne;
      if (!lim.meta_base_allocation) return kEINVAL;  // no context negotiated
      break;
    default:
      return kEINVAL;
  }
  if (req.flags & ~allowed_flags) return kEINVAL;
  if (req.type == kCmdRead && (req.flags & kCmdFlagDf) && !lim.structured_replies) return kEINVAL;
  if (!ranged) return (req.offset || req.length) ? kEINVAL : 0;
  if (writes && lim.read_only) return kEPERM;
  // Size checks before range checks: an oversize READ is EOVERFLOW (with
  // structured replies the client can tell it apart), others EINVAL.
  if ((req.type == kCmdRead || req.type == kCmdWrite) && req.length > kMaxPayload)
    return (req.type == kCmdRead && lim.structured_replies) ? kEOVERFLOW : kEINVAL;
  if (req.length == 0) return kEINVAL;
  if (req.offset > lim.size || req.length > lim.size - req.offset)
    return writes ? kENOSPC : kEINVAL;
  if (req.offset % lim.min_block || req.length % lim.min_block) return kEINVAL;
  return 0;
}

}  // namespace ubcache::nbd
