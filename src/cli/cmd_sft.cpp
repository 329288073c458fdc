// `trellis sft [CONFIG...] [--set k=v]... [--run-dir D] [--resume]`: supervised fine-tuning on
// (prompt, completion) pairs or on an environment's tasks with reference solutions (rl/sft.h).
// With --resume and no CONFIG, the run directory's saved config.toml is used.
#include <filesystem>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "common/error.h"
#include "rl/sft.h"

namespace trellis::cli {
namespace {

struct SftFlags {
  RunFlags run;
  bool resume = false;
};

void run_sft_command(SftFlags f) {
  if (f.resume && f.run.configs.empty() && !f.run.run_dir.empty()) {
    const auto saved = std::filesystem::path(f.run.run_dir) / "config.toml";
    if (std::filesystem::exists(saved)) f.run.configs = {saved.string()};
  }
  const Config config = f.run.resolve();
  if (f.resume && config.get<std::string>("run.dir").empty()) {
    fail("trellis sft", "--resume continues a run: name its directory with --run-dir DIR");
  }
  const auto compute = setup_compute(config);
  rl::run_sft(config, compute, {.resume = f.resume});
}

}  // namespace

void add_sft_command(CLI::App& app) {
  static SftFlags flags;
  auto* cmd = app.add_subcommand(
      "sft",
      "Supervised fine-tuning on (prompt, completion) JSONL ([sft] data) or on an environment's\n"
      "tasks with reference solutions: a warm start that gives RL a non-zero success rate");
  add_run_flags(cmd, flags.run);
  cmd->add_flag("--resume", flags.resume,
                "continue the run in --run-dir from its newest checkpoint (CONFIG defaults to its "
                "config.toml)");
  cmd->callback([] { run_sft_command(flags); });
}

}  // namespace trellis::cli
