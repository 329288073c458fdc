// `trellis orchestrator [CONFIG...] [--set k=v ...] [--run-dir DIR]`: the orchestrator's HTTP
// API (orchestrator/api.h) over the state and rollout store in [orchestrator] data_dir (default:
// the run directory). Writes its URL to <data_dir>/orchestrator.url once listening, logs every
// submission decision, and runs until SIGINT or SIGTERM, then stops cleanly. Restarting it on the
// same run directory carries on with the same run ID, step counter and accepted files.
#include <chrono>
#include <thread>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/stop_signal.h"
#include "common/logging.h"
#include "common/run_dir.h"
#include "orchestrator/api.h"

namespace trellis::cli {

void add_orchestrator_command(CLI::App& app) {
  static RunFlags flags;
  auto* cmd = app.add_subcommand(
      "orchestrator",
      "Serve the step counter, signed upload URLs, upload checks and accepted rollouts over HTTP");
  cmd->add_option("config", flags.configs, "TOML configuration files, applied left to right")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", flags.overrides, "override one key: section.key=value (repeatable)");
  cmd->add_option("--run-dir", flags.run_dir,
                  "run directory; its name is the run ID, its state survives restarts (default: "
                  "runs/<run.name>-<UTC timestamp>/)");
  cmd->callback([] {
    const auto& stop = stop_requested();
    const Config config = flags.resolve();
    const auto run_dir = join_run_dir(config);  // `trellis run` wrote config.toml already
    orchestrator::Server server(orchestrator::api_options(config, run_dir));
    server.start();
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    log::info("orchestrator: stop signal received, shutting down");
    server.stop();
  });
}

}  // namespace trellis::cli
