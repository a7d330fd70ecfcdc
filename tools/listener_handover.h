// SPDX-License-Identifier: Apache-2.0
// Listening sockets that outlive one serve process, so that NBD clients
// connecting during an upgrade or a restart wait in the socket's backlog
// (their handshake starts when the next daemon accepts them) instead of
// being refused. The next daemon finds them with InheritedListeners() and
// NbdServer takes each one whose address its --nbd names. Two carriers,
// one for each way the daemon runs:
//  - under a service manager ($NOTIFY_SOCKET set, ubcache@.service):
//    systemd's file descriptor store. StoreListeners() sends the listening
//    sockets with FDSTORE=1 once they are bound; systemd keeps a copy while
//    the unit runs or a restart of it is queued (FileDescriptorStoreMax= in
//    the unit) and passes them to the next start as LISTEN_FDS
//    (sd_listen_fds(3)).
//  - by hand: at a hand-off, KeepListeners() leaves the sockets in a keeper
//    process, forked from the daemon as it exits, that hands them over to
//    the next start on an abstract Unix socket named for the --nbd
//    addresses (only to a peer of the same uid) and exits; it gives up
//    after 10 minutes without one, closing them.
//
// Thread safety: from serve's main thread; KeepListeners() when every
// other thread has ended or may be forked away.
#pragma once

#include <string>
#include <vector>

namespace ubcache {

// Listening sockets a previous daemon left for this one: LISTEN_FDS (when
// LISTEN_PID is this process), else those of a keeper for `addresses`.
std::vector<int> InheritedListeners(const std::vector<std::string>& addresses);
// Sends `fds` to the service manager's file descriptor store; false when
// there is no service manager (by hand).
bool StoreListeners(const std::vector<int>& fds);
// Forks the keeper for `fds` (bound to `addresses`) and closes this
// process's copies; logs where they went.
void KeepListeners(const std::vector<int>& fds, const std::vector<std::string>& addresses);

}  // namespace ubcache
