#include "discovery/requirements.h"

#include <fmt/format.h>

namespace trellis::discovery {

Requirements requirements(const Config& config, const std::string& section) {
  Requirements r;
  r.cpu_cores = config.get_at_least<int64_t>(section + ".cpu_cores", 0);
  r.memory_mib = config.get_at_least<int64_t>(section + ".memory_mib", 0);
  r.disk_mib = config.get_at_least<int64_t>(section + ".disk_mib", 0);
  r.gpus = config.get_at_least<int64_t>(section + ".gpus", 0);
  r.gpu_memory_mib = config.get_at_least<int64_t>(section + ".gpu_memory_mib", 0);
  return r;
}

std::vector<std::string> unmet(const Hardware& hw, const Requirements& r) {
  std::vector<std::string> out;
  if (hw.cpu_cores < r.cpu_cores) {
    out.push_back(
        fmt::format("{} CPU cores are needed, the node has {}", r.cpu_cores, hw.cpu_cores));
  }
  if (hw.memory_mib < r.memory_mib) {
    out.push_back(
        fmt::format("{} MiB of memory are needed, the node has {}", r.memory_mib, hw.memory_mib));
  }
  if (hw.disk_mib < r.disk_mib) {
    out.push_back(
        fmt::format("{} MiB of free disk are needed, there are {}", r.disk_mib, hw.disk_mib));
  }
  int64_t big_enough = 0;
  for (const auto& g : hw.gpus) big_enough += g.memory_mib >= r.gpu_memory_mib ? 1 : 0;
  if (big_enough < r.gpus) {
    out.push_back(fmt::format("{} GPUs with at least {} MiB each are needed, the node has {}",
                              r.gpus, r.gpu_memory_mib, big_enough));
  }
  return out;
}

}  // namespace trellis::discovery
