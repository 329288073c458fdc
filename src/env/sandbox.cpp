// Sandbox (see sandbox.h).
#include "env/sandbox.h"

#include <cmath>

#include "common/config.h"
#include "common/error.h"

namespace trellis::env {

SandboxLimits SandboxLimits::from_config(const Config& config) {
  SandboxLimits l;
  l.python = config.get<std::string>("env.code.python");
  l.cpu_seconds = config.get<double>("env.code.cpu_seconds");
  l.wall_seconds = config.get<double>("env.code.wall_seconds");
  l.memory_mib = config.get<int64_t>("env.code.memory_mib");
  l.max_processes = config.get<int64_t>("env.code.max_processes");
  l.max_output_kib = config.get<int64_t>("env.code.max_output_kib");
  auto positive = [](double v, const char* key) {
    if (!(v > 0) || !std::isfinite(v)) fail(key, "must be a positive number, got {}", v);
  };
  positive(l.cpu_seconds, "env.code.cpu_seconds");
  positive(l.wall_seconds, "env.code.wall_seconds");
  positive(static_cast<double>(l.memory_mib), "env.code.memory_mib");
  positive(static_cast<double>(l.max_processes), "env.code.max_processes");
  positive(static_cast<double>(l.max_output_kib), "env.code.max_output_kib");
  if (l.python.empty() || l.python.front() != '/') {
    fail("env.code.python", "must be an absolute path to a Python interpreter, got '{}'", l.python);
  }
  return l;
}

}  // namespace trellis::env
