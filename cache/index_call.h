// SPDX-License-Identifier: Apache-2.0
// CallIndex: one ExtentIndex call from a request engine, made so that a
// serving reactor never waits for it (doc/design.md, "A serving reactor
// never waits").
//
// `call` runs at once. If it returns WouldBlock (a node it needs is not in
// memory; it changed nothing), the node is read on this reactor
// (ExtentIndex::LoadMissing) and `call` runs again once it is in — as
// bcache re-runs a cache_lookup that returned -EAGAIN. A change too large
// to make without I/O runs on a thread that may wait (CacheSet::RunMayWait)
// and `done` comes back to this reactor. `done` gets the call's status: at
// once, before CallIndex returns, when nothing was missing (the common
// case costs no hop). A node that cannot be read ends it with that error.
//
// Thread safety: a reactor thread. `call` may run more than once, and on
// another thread while this request waits: it may touch only the request's
// own state.
#pragma once

#include "util/callback.h"
#include "util/status.h"

namespace ubcache {

class CacheSet;

void CallIndex(CacheSet* set, Callback<Status()> call, Callback<void(Status)> done);

}  // namespace ubcache
