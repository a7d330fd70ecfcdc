// SPDX-License-Identifier: Apache-2.0
#include "util/status.h"

#include <cstring>

namespace ubcache {

Status Status::FromErrno(int err, std::string context) {
  if (err < 0) err = -err;
  std::string msg = std::move(context);
  msg += ": ";
  msg += std::strerror(err);
  Code code;
  switch (err) {
    case 0: return Status();
    case EINVAL: code = Code::kInvalidArgument; break;
    case ENOENT: code = Code::kNotFound; break;
    case ENOSPC: code = Code::kNoSpace; break;
    case EOPNOTSUPP: code = Code::kNotSupported; break;
    case EPERM:
    case EACCES:
    case EROFS: code = Code::kPermission; break;
    case EOVERFLOW:
    case EFBIG: code = Code::kOverflow; break;
    case EBUSY: code = Code::kBusy; break;
    case ESHUTDOWN:
    case ECANCELED: code = Code::kShutdown; break;
    case EAGAIN: code = Code::kAgain; break;
    default: code = Code::kIoError; break;
  }
  return Status(code, std::move(msg));
}

int Status::ToErrno() const {
  switch (code_) {
    case Code::kOk: return 0;
    case Code::kIoError: return EIO;
    case Code::kInvalidArgument: return EINVAL;
    case Code::kNotFound: return ENOENT;
    case Code::kCorruption: return EIO;
    case Code::kNoSpace: return ENOSPC;
    case Code::kNotSupported: return EOPNOTSUPP;
    case Code::kPermission: return EPERM;
    case Code::kOverflow: return EOVERFLOW;
    case Code::kBusy: return EBUSY;
    case Code::kShutdown: return ESHUTDOWN;
    case Code::kAgain: return EAGAIN;
    case Code::kWouldBlock: return EAGAIN;
  }
  return EIO;
}

std::string Status::ToString() const {
  const char* name = "OK";
  switch (code_) {
    case Code::kOk: return "OK";
    case Code::kIoError: name = "I/O error"; break;
    case Code::kInvalidArgument: name = "invalid argument"; break;
    case Code::kNotFound: name = "not found"; break;
    case Code::kCorruption: name = "corruption"; break;
    case Code::kNoSpace: name = "no space"; break;
    case Code::kNotSupported: name = "not supported"; break;
    case Code::kPermission: name = "permission denied"; break;
    case Code::kOverflow: name = "too large"; break;
    case Code::kBusy: name = "busy"; break;
    case Code::kShutdown: name = "shut down"; break;
    case Code::kAgain: name = "try again"; break;
    case Code::kWouldBlock: name = "would block"; break;
  }
  return std::string(name) + ": " + message();
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return msg_ ? *msg_ : kEmpty;
}

}  // namespace ubcache
