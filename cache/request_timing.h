// SPDX-License-Identifier: Apache-2.0
// TimeRequest: a client request's completion, wrapped so that its call
// records the request in RequestStats (what it was, how long since
// `start_ns` on the NowNanos() clock, whether it failed): one pooled
// object, no malloc, one clock reading.
//
// Thread safety: the wrapper is called on the reactor that submitted the
// request, which records into its own shard.
#pragma once

#include <cstdint>

#include "backend/block_device.h"
#include "cache/request_stats.h"

namespace ubcache {

IoDone TimeRequest(RequestStats* stats, RequestStats::Op op, uint64_t len, uint64_t start_ns,
                   IoDone done);

}  // namespace ubcache
