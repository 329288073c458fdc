// Flags of the commands driven by a configuration (`trellis sft`, `trellis rl`, `trellis run`, the
// roles): CONFIG files (positional, composed left to right), --set section.key=value overrides,
// --device / --dtype / --threads, --run-dir and --resume.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "model/compute.h"

namespace trellis::cli {

// --device / --dtype / --threads for commands driven by a configuration: given, each overrides
// its [compute] key after every CONFIG file and --set.
struct ComputeOverrides {
  std::string device, dtype;  // "" = not given
  int threads = -1;           // -1 = not given
  void add_to(CLI::App* cmd);
  void apply(std::vector<std::string>& overrides) const;
};

struct RunFlags {
  std::vector<std::string> configs, overrides;
  ComputeOverrides compute;
  std::string run_dir;  // "" = run.dir, else runs/<run.name>-<UTC timestamp>/
  bool resume = false;  // continue the run directory's newest checkpoint

  // Defaults <- CONFIG files <- --set overrides, with run.dir set to --run-dir when given. With
  // --resume and no CONFIG, the run directory's saved config.toml is the CONFIG; Error unless
  // --resume names a run directory.
  Config resolve() const;
};

void add_run_flags(CLI::App* cmd, RunFlags& flags);

// [compute] of `config`: threads, device and dtype (Error naming the key if unavailable).
model::Compute setup_compute(const Config& config);

}  // namespace trellis::cli
