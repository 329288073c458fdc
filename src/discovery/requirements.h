// What a pool asks of a node's hardware (specs/protocol.md §4): the orchestrator invites only
// nodes whose published metadata meets its pool's requirements, and a node agent checks its own
// measured hardware against them before it publishes itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "discovery/node_metadata.h"

namespace trellis::discovery {

struct Requirements {
  int64_t cpu_cores = 0, memory_mib = 0, disk_mib = 0;
  int64_t gpus = 0, gpu_memory_mib = 0;  // GPUs with at least that much memory each
};

// The requirements under `section` (cpu_cores, memory_mib, disk_mib, gpus, gpu_memory_mib);
// Error naming the key for a negative one.
Requirements requirements(const Config& config, const std::string& section);

// Each requirement `hw` falls short of, as a sentence naming what is needed and what there is;
// empty when it meets them all.
std::vector<std::string> unmet(const Hardware& hw, const Requirements& r);

}  // namespace trellis::discovery
