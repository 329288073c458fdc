// `trellis rl CONFIG`: the single-process RL loop (rl/rl_loop.h): generate, score, filter, train,
// swap weights, one console line per step; outputs in the run directory.
#include "cli/commands.h"
#include "cli/rank_launcher.h"
#include "cli/run_flags.h"
#include "common/run_dir.h"
#include "rl/rl_loop.h"

namespace trellis::cli {

void add_rl_command(CLI::App& app) {
  static RunFlags flags;
  static RankOverrides ranks;
  auto* cmd = app.add_subcommand("rl",
                                 "Train a policy with RL in one process (the trainer on --nproc "
                                 "ranks): generate, score, filter, train, repeat");
  add_run_flags(cmd, flags);
  ranks.add_to(cmd);
  cmd->callback([] {
    run_as_trainer_rank(flags, ranks, make_run_dir,
                        [](const Config& config, const model::Compute& compute,
                           const std::filesystem::path& run_dir, rl::ProcessGroup& group) {
                          rl::run_rl(config, run_dir, flags.resume, compute, group);
                        });
  });
}

}  // namespace trellis::cli
