// Run directory: where one run's outputs go (DESIGN.md §4): `run.dir` when set, else
// runs/<run.name>-<UTC timestamp>/ under the current directory. Holds config.toml (the resolved
// configuration), logs/, metrics.jsonl, checkpoints/ and rollouts/.
#pragma once

#include <filesystem>

#include "common/config.h"

namespace trellis {

// Creates the directory (and logs/) and writes config.toml atomically.
std::filesystem::path make_run_dir(const Config& config);

}  // namespace trellis
