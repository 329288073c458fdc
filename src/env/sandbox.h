// Sandbox: runs untrusted, model-written Python under bubblewrap with resource limits.
//
// Inside: no network (own network namespace with no interfaces), the host's /usr, /lib, /bin
// read-only, a private empty /tmp and working directory (tmpfs), no view of /home, /root, /work or
// other host paths, own PID namespace; dies with its parent. Limits (setrlimit in the child plus a
// wall-clock watchdog that kills the whole process group): CPU time, wall time, address space,
// process count, file size; output beyond max_output_kib is cut off and the run counts as failed.
#pragma once

#include <cstdint>
#include <string>

namespace trellis {
class Config;
}

namespace trellis::env {

struct SandboxLimits {
  std::string python = "/usr/bin/python3";
  double cpu_seconds = 5;
  double wall_seconds = 10;
  int64_t memory_mib = 512;
  int64_t max_processes = 16;
  int64_t max_output_kib = 1024;

  static SandboxLimits from_config(const Config& config);  // [env.code]; Error on bad values
};

}  // namespace trellis::env
