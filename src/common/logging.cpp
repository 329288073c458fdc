#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/error.h"

namespace trellis {

void set_log_level(const std::string& level) {
  static bool configured = [] {
    auto logger = spdlog::stderr_color_mt("trellis");
    logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_default_logger(logger);
    return true;
  }();
  (void)configured;
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    throw Error("unknown log level '" + level + "' (use trace|debug|info|warn|error|off)");
  }
  spdlog::set_level(lvl);
}

}  // namespace trellis
