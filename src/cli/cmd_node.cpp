// `trellis node [CONFIG...] [--set k=v ...] [--run-dir DIR]`: the node agent (node/agent.h) until
// SIGINT or SIGTERM. It publishes this machine to node.discovery_url, waits for an invite from one
// of node.pools, and runs the tasks that pool gives it.
#include <filesystem>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/stop_signal.h"
#include "common/run_dir.h"
#include "node/agent.h"

namespace trellis::cli {

void add_node_command(CLI::App& app) {
  static RunFlags flags;
  auto* cmd = app.add_subcommand(
      "node", "Node agent: publish this machine, accept a pool's invite, run the tasks it gives");
  cmd->add_option("config", flags.configs, "TOML configuration files, applied left to right")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", flags.overrides, "override one key: section.key=value (repeatable)");
  cmd->add_option("--run-dir", flags.run_dir,
                  "directory whose nodes/<node.name>/ holds the node's key, cache and tasks");
  cmd->callback([] {
    const auto& stop = stop_requested();
    const Config config = flags.resolve();
    const auto run_dir = join_run_dir(config);
    node::AgentOptions o = node::AgentOptions::from_config(config, run_dir);
    o.trellis_binary = self_binary();
    o.software_version = TRELLIS_VERSION;
    node::run_agent(o, stop);
  });
}

}  // namespace trellis::cli
