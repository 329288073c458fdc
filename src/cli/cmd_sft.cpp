// `trellis sft [CONFIG...] [--set k=v]... [--run-dir D] [--resume]`: supervised fine-tuning on
// (prompt, completion) pairs or on an environment's tasks with reference solutions (rl/sft.h).
// With --resume and no CONFIG, the run directory's saved config.toml is used.
#include "cli/commands.h"
#include "cli/run_flags.h"
#include "rl/sft.h"

namespace trellis::cli {

void add_sft_command(CLI::App& app) {
  static RunFlags flags;
  auto* cmd = app.add_subcommand(
      "sft",
      "Supervised fine-tuning on (prompt, completion) JSONL ([sft] data) or on an environment's\n"
      "tasks with reference solutions: a warm start that gives RL a non-zero success rate");
  add_run_flags(cmd, flags);
  cmd->callback([] {
    const Config config = flags.resolve();
    const auto compute = setup_compute(config);
    rl::run_sft(config, compute, {.resume = flags.resume});
  });
}

}  // namespace trellis::cli
