// SPDX-License-Identifier: Apache-2.0
// Logging: spdlog to stderr, one process-wide logger. Levels come from the
// command line (--log-level trace|debug|info|warn|error|off, -v for debug).
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

#include "util/status.h"

namespace ubcache {

// Installs the stderr logger with ubcache's pattern. Call once, early.
void InitLogging();
// "trace", "debug", "info", "warn", "error", "off".
Status SetLogLevel(std::string_view level);

}  // namespace ubcache

#define UB_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define UB_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define UB_INFO(...) ::spdlog::info(__VA_ARGS__)
#define UB_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define UB_ERROR(...) ::spdlog::error(__VA_ARGS__)
