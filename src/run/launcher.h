// `trellis run`: every role of a run as child processes of one launcher on loopback — the
// orchestrator first (on a free port, kept across its restarts), then the trainer, the relays,
// run.workers inference workers and run.validators validators, all reading the run directory's
// resolved config.toml. The launcher prints a compact live view (step, reward, staleness, rollout
// tokens/s, trainer idle, submissions accepted, rejected and validating), restarts a worker, a
// validator, a relay or the orchestrator that dies, stops everything cleanly on completion or
// Ctrl-C (workers and validators, trainer, relays, then orchestrator), and writes report.html.
//
// Each process gets compute.threads / (workers + 1) threads (at least 1): co-located processes
// with spinning OpenMP pools on shared cores are many times slower than partitioned ones.
#pragma once

#include <atomic>
#include <filesystem>

#include "common/config.h"

namespace trellis::run {

struct LaunchOptions {
  std::filesystem::path trellis_binary;  // the `trellis` the children run
  bool resume = false;                   // the trainer continues from its newest checkpoint
};

// Returns the trainer's exit status (0 when the run completed). Error when a role cannot start.
int launch_run(const Config& config, const std::filesystem::path& run_dir,
               const LaunchOptions& options, const std::atomic<bool>& stop);

}  // namespace trellis::run
