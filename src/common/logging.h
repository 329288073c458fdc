// Logging: one process-wide spdlog logger on stderr ("[12:00:00.123] [info] message").
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace trellis {

// Sets the level by name (trace|debug|info|warn|error|off); an unknown name is an Error.
void set_log_level(const std::string& level);

namespace log = spdlog;  // log::info("..."), log::warn("..."), ...

}  // namespace trellis
