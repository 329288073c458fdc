// `trellis discovery [CONFIG...] [--set k=v ...] [--run-dir DIR]`: the discovery service
// (discovery/server.h) over <data_dir>/discovery.sqlite, until SIGINT or SIGTERM. Nodes publish
// their signed metadata there; only discovery.readers (the orchestrator's key) list them.
#include <chrono>
#include <thread>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/stop_signal.h"
#include "common/logging.h"
#include "common/run_dir.h"
#include "discovery/server.h"

namespace trellis::cli {

void add_discovery_command(CLI::App& app) {
  static RunFlags flags;
  auto* cmd = app.add_subcommand(
      "discovery",
      "Serve node discovery: nodes publish signed metadata, the orchestrator reads it");
  cmd->add_option("config", flags.configs, "TOML configuration files, applied left to right")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", flags.overrides, "override one key: section.key=value (repeatable)");
  cmd->add_option("--run-dir", flags.run_dir, "directory for discovery.sqlite and discovery.url");
  cmd->callback([] {
    const auto& stop = stop_requested();
    const Config config = flags.resolve();
    const auto run_dir = join_run_dir(config);
    discovery::Server server(discovery::server_options(config, run_dir));
    server.start();
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    log::info("discovery: stop signal received, shutting down");
    server.stop();
  });
}

}  // namespace trellis::cli
