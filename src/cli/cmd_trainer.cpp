// `trellis trainer CONFIG` and `trellis infer CONFIG`: the two halves of the decoupled pipeline
// as separate processes that meet only through the orchestrator, rollout files and the policy
// directory (pipeline/trainer_service.h, pipeline/inference_worker.h).
#include <filesystem>

#include "cli/commands.h"
#include "cli/rank_launcher.h"
#include "cli/run_flags.h"
#include "cli/stop_signal.h"
#include "common/error.h"
#include "common/run_dir.h"
#include "pipeline/inference_worker.h"
#include "pipeline/trainer_service.h"

namespace trellis::cli {
namespace {

// A worker's directory (its key, and the policy versions it fetches):
// it must be named, and config.toml there stays the trainer's (a worker's overrides are its own).
std::filesystem::path worker_dir(const Config& config) {
  const std::filesystem::path dir = config.get<std::string>("run.dir");
  if (dir.empty())
    fail("--run-dir", "`trellis infer` needs a directory for its key and the policies it reads");
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

void add_pipeline_commands(CLI::App& app) {
  static RunFlags trainer_flags, infer_flags;
  static RankOverrides ranks;
  auto* trainer = app.add_subcommand(
      "trainer", "Trusted trainer: train on accepted rollouts, publish each policy version");
  add_run_flags(trainer, trainer_flags);
  ranks.add_to(trainer);
  trainer->callback([] {
    const auto& stop = stop_requested();
    run_as_trainer_rank(trainer_flags, ranks, join_run_dir,
                        [&](const Config& config, const model::Compute& compute,
                            const std::filesystem::path& run_dir, rl::ProcessGroup& group) {
                          pipeline::run_trainer_service(config, run_dir, trainer_flags.resume,
                                                        compute, group, stop);
                        });
  });

  auto* infer = app.add_subcommand(
      "infer", "Inference worker: generate rollouts for the step counter's step and upload them");
  add_run_flags(infer, infer_flags);
  infer->callback([] {
    const Config config = infer_flags.resolve();
    const auto& stop = stop_requested();
    const model::Compute compute = setup_compute(config);
    pipeline::run_inference_worker(config, worker_dir(config), compute, stop);
  });
}

}  // namespace trellis::cli
