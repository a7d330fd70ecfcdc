// SPDX-License-Identifier: Apache-2.0
// CallControl: one request to a running daemon's control socket (the wire
// protocol of doc/control.md), for `ubcache ctl` and `ubcache status`.
#pragma once

#include <functional>
#include <string>

#include "control/protocol.h"
#include "util/status.h"

namespace ubcache {

struct ControlReply {
  bool ok = false;   // false: the daemon answered with an error frame
  std::string body;  // the reply, or the daemon's error message
};

// Connects to `path`, sends `req` and returns the daemon's answer. Errors
// (Status) are about reaching it: no socket, refused (a stale socket), a
// closed connection, no reply within `timeout_ms` (-1: wait for ever, as a
// flush may take as long as writeback does). `progress` gets the progress
// frames of long commands.
Result<ControlReply> CallControl(const std::string& path, const control::Request& req, int timeout_ms,
                                 const std::function<void(const std::string&)>& progress = nullptr);

}  // namespace ubcache
