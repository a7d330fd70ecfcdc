// SPDX-License-Identifier: Apache-2.0
// Prometheus text exposition (format 0.0.4) of every attribute that names a
// metric in the attribute table: ubcache_<metric>{device="EXPORT"} for the
// backing-device and stats groups, without a device label for the cache
// set's. The names follow node_exporter's bcache collector where it has the
// same idea (cache_hits_total, bypassed_bytes_total, dirty_data_bytes,
// priority_stats_unused_percent, ...); doc/control.md lists them. Then one
// family that is not an attribute, ubcache_request_duration_seconds{device,
// op}: each export's request latency histogram (metrics.cpp says why).
//
// Thread safety: reads only lock-free state (see attributes.h); any thread.
#pragma once

#include <string>
#include <vector>

#include "control/attributes.h"

namespace ubcache::control {

std::string RenderMetrics(const std::vector<Target>& targets);

}  // namespace ubcache::control
