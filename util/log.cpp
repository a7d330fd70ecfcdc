// SPDX-License-Identifier: Apache-2.0
#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace ubcache {

void InitLogging() {
  auto logger = spdlog::stderr_color_mt("ubcache");
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ [%t] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::info);
}

Status SetLogLevel(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off")
    return Status::InvalidArgument("unknown log level '" + std::string(level) +
                                   "' (trace, debug, info, warn, error, off)");
  spdlog::set_level(lvl);
  return Status::OK();
}

}  // namespace ubcache
