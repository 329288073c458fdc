// `trellis run CONFIG` (every role of a run on this machine, run/launcher.h) and `trellis
// quickstart` (a cached SFT warm start of the tiny model, then `trellis run` on it).
#include <filesystem>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/stop_signal.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/run_dir.h"
#include "model/presets.h"
#include "rl/checkpoints.h"
#include "rl/sft.h"
#include "run/launcher.h"

namespace trellis::cli {
namespace fs = std::filesystem;
namespace {

// Runs every role; exits 130 after Ctrl-C (saying how to continue), Error when the trainer failed.
void launch(const Config& config, bool resume) {
  const auto& stop = stop_requested();
  const fs::path run_dir = make_run_dir(config);
  const int status =
      run::launch_run(config, run_dir, {.trellis_binary = self_binary(), .resume = resume}, stop);
  if (status == 130) {
    if (const auto checkpoint = rl::latest_checkpoint(run_dir / "checkpoints"))
      std::printf("stopped; `trellis run --run-dir %s --resume` continues from %s\n",
                  run_dir.c_str(), checkpoint->filename().c_str());
    else
      std::printf("stopped before the first checkpoint (trainer.checkpoint_every)\n");
    std::exit(130);
  }
  if (status != 0)
    fail((run_dir / "logs" / "trainer.log").string(), "the trainer exited with status {}", status);
}

// The warm start the quickstart trains from: the tiny model after `trellis sft` on the config's
// environment, made once under `cache` and reused.
fs::path warm_start(const Config& config, const fs::path& cache) {
  const fs::path warm = cache / "warm";
  if (fs::exists(warm / "config.json")) {
    std::printf("warm start: %s (cached; delete it to train it again)\n", warm.c_str());
    return warm;
  }
  const fs::path base = cache / "base";
  model::init_model_dir(base, model::Arch::Qwen2, "tiny", 0);
  fs::remove_all(cache / "sft");  // an interrupted earlier attempt
  Config sft = config;
  sft.set_string("model.path", base.string());
  sft.set_string("sft.out", warm.string());
  sft.set_string("run.dir", (cache / "sft").string());
  std::printf("warm start: SFT of the tiny model (%s) on %s, cached in %s\n", base.c_str(),
              config.get<std::string>("env.name").c_str(), warm.c_str());
  std::fflush(stdout);
  rl::run_sft(sft, setup_compute(sft), {});
  return warm;
}

}  // namespace

void add_run_commands(CLI::App& app) {
  static RunFlags flags;
  auto* run = app.add_subcommand(
      "run",
      "Run every role on this machine: orchestrator, trainer and run.workers inference workers\n"
      "as processes on loopback, with a live view, logs and report.html in the run directory");
  add_run_flags(run, flags);
  run->callback([] { launch(flags.resolve(), flags.resume); });

  static RunFlags quick;
  static std::string cache = "runs/quickstart-cache";
  auto* qs = app.add_subcommand(
      "quickstart",
      "SFT warm start of the tiny model (cached), then `trellis run` on it: two workers, a\n"
      "trainer and an orchestrator; the reward rises within minutes on 2 cores");
  add_run_flags(qs, quick);
  qs->add_option("--cache", cache, "where the warm start is kept")->capture_default_str();
  qs->callback([] {
    RunFlags f = quick;
    if (f.configs.empty()) {
      if (!fs::exists("examples/quickstart.toml"))
        fail("examples/quickstart.toml",
             "not found: run from the repository root or name a CONFIG");
      f.configs = {"examples/quickstart.toml"};
    }
    Config config = f.resolve();
    const fs::path warm = warm_start(config, cache);
    config.set_string("model.path", warm.string());
    launch(config, f.resume);
  });
}

}  // namespace trellis::cli
