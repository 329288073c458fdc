// Run directory: where one run's outputs go (DESIGN.md §4): `run.dir` when set, else
// runs/<run.name>-<UTC timestamp>/ under the current directory. Holds config.toml (the resolved
// configuration), logs/, metrics.jsonl, checkpoints/ and rollouts/.
#pragma once

#include <filesystem>

#include "common/config.h"

namespace trellis {

// Creates the directory (and logs/) and writes config.toml atomically.
std::filesystem::path make_run_dir(const Config& config);

// The same, for a role joining a run that another process may have made (`trellis run` starts the
// orchestrator and trainer in its run directory): config.toml is written only when absent, so the
// run's resolved configuration is not replaced by one role's overrides (a port, a thread count).
std::filesystem::path join_run_dir(const Config& config);

}  // namespace trellis
