// `trellis rl CONFIG`: the single-process RL loop (rl/rl_loop.h): generate, score, filter, train,
// swap weights, one console line per step; outputs in the run directory.
#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/trainer_ranks.h"
#include "common/run_dir.h"
#include "rl/rl_loop.h"
#include "rl/trainer_ranks.h"

namespace trellis::cli {

void add_rl_command(CLI::App& app) {
  static RunFlags flags;
  static RankOverrides ranks;
  auto* cmd = app.add_subcommand(
      "rl", "Train a policy with RL in one process: generate, score, filter, train, repeat");
  add_run_flags(cmd, flags);
  ranks.add_to(cmd);
  cmd->callback([] {
    RunFlags with_ranks = flags;
    ranks.apply(with_ranks.overrides);
    const Config config = with_rank_threads(with_ranks.resolve());
    const model::Compute compute = setup_compute(config);
    if (is_follower(config)) {  // a rank started by rank 0 (--nproc), or on another machine
      TrainerRanks follower(config, std::filesystem::current_path());
      follower.run([&] { rl::run_follower(config, compute, follower.group()); });
      return;
    }
    const auto run_dir = make_run_dir(config);
    TrainerRanks leader(config, run_dir);
    leader.run([&] { rl::run_rl(config, run_dir, flags.resume, compute, leader.group()); });
  });
}

}  // namespace trellis::cli
