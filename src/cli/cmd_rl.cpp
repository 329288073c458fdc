// `trellis rl CONFIG`: the single-process RL loop (rl/rl_loop.h): generate, score, filter, train,
// swap weights, one console line per step; outputs in the run directory.
#include "cli/commands.h"
#include "cli/run_flags.h"
#include "common/run_dir.h"
#include "rl/rl_loop.h"

namespace trellis::cli {

void add_rl_command(CLI::App& app) {
  static RunFlags flags;
  auto* cmd = app.add_subcommand(
      "rl", "Train a policy with RL in one process: generate, score, filter, train, repeat");
  add_run_flags(cmd, flags);
  cmd->callback([] {
    const Config config = flags.resolve();
    const model::Compute compute = setup_compute(config);
    const auto run_dir = make_run_dir(config);
    rl::run_rl(config, run_dir, flags.resume, compute);
  });
}

}  // namespace trellis::cli
