// `trellis orchestrator [CONFIG...] [--set k=v ...] [--run-dir DIR]`: the orchestrator's HTTP
// API (orchestrator/api.h) over the state and rollout store in [orchestrator] data_dir (default:
// the run directory). Writes its URL to <data_dir>/orchestrator.url once listening, logs every
// submission decision, and runs until SIGINT or SIGTERM, then stops cleanly. Restarting it on the
// same run directory carries on with the same run ID, step counter and accepted files.
//
// `trellis orchestrator nginx-config [CONFIG...] --out DIR [--listen HOST:PORT]`: nginx.conf for
// nginx in front of it on the open internet (orchestrator/nginx_front.h).
//
// The pool owner's calls to a running orchestrator (with the trainer token,
// orchestrator/pool_policy.h):
//   `trellis orchestrator stake ADDRESS AMOUNT --run-dir DIR`   deposit stake for a node
//   `trellis orchestrator approve ADDRESS --run-dir DIR`        admit a node (join = "approval")
#include <chrono>
#include <iostream>
#include <thread>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/stop_signal.h"
#include "common/error.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/run_dir.h"
#include "orchestrator/api.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"
#include "orchestrator/nginx_front.h"

namespace trellis::cli {
namespace fs = std::filesystem;

namespace {

// A client of the orchestrator of `flags`' run directory with the owner's (trainer's) token: its
// URL from <data dir>/orchestrator.url when the orchestrator is running there, else the config's.
orchestrator::Client owner_client(const RunFlags& flags) {
  if (flags.run_dir.empty()) fail("--run-dir", "name the orchestrator's run directory");
  const Config config = flags.resolve();
  const fs::path run_dir = flags.run_dir;
  const auto options = orchestrator::api_options(config, run_dir);
  const fs::path url_file = options.data_dir / "orchestrator.url";
  std::string url = orchestrator::client_url(config);
  if (fs::exists(url_file)) {
    url = read_file(url_file.string());
    while (!url.empty() && (url.back() == '\n' || url.back() == ' ')) url.pop_back();
  }
  return orchestrator::Client(
      url, orchestrator::client_token(config, run_dir, orchestrator::Role::kTrainer));
}

void add_owner_commands(CLI::App* cmd) {
  static RunFlags flags;
  static std::string address;
  static int64_t amount = 0;
  auto* stake = cmd->add_subcommand(
      "stake", "Deposit stake (work units) for a node, on the ledger (join = \"stake\")");
  stake->add_option("address", address, "the node's address (64 hex digits)")->required();
  stake->add_option("amount", amount, "work units")->required()->check(CLI::Range(1, INT32_MAX));
  auto* approve =
      cmd->add_subcommand("approve", "Admit a node, on the ledger (join = \"approval\")");
  approve->add_option("address", address, "the node's address (64 hex digits)")->required();
  static std::string role, task_config, task_node;
  auto* task = cmd->add_subcommand(
      "task",
      "Create a task (worker, validator or relay) that a node agent pulls with its heartbeat");
  task->add_option("role", role, "worker | validator | relay")->required();
  task->add_option("task_config", task_config, "the role's Trellis TOML")
      ->required()
      ->check(CLI::ExistingFile);
  task->add_option("--node", task_node,
                   "the node to run it (default: the next live node without one)");
  static int64_t lines = 100;
  auto* logs = cmd->add_subcommand("logs", "Print the end of a node's task log (from its agent)");
  logs->add_option("address", address, "the node's address (64 hex digits)")->required();
  logs->add_option("--lines", lines, "how many lines")
      ->capture_default_str()
      ->check(CLI::Range(1, 10'000));
  for (CLI::App* sub : {stake, approve, task, logs}) {
    sub->add_option("--run-dir", flags.run_dir, "the orchestrator's run directory")->required();
    sub->add_option("--set", flags.overrides, "override one key: section.key=value (repeatable)");
    sub->fallthrough();
  }
  stake->callback([] {
    const int64_t now = owner_client(flags).deposit_stake(address, amount);
    std::cout << fmt::format("node {} now holds a stake of {} work units\n", address, now);
  });
  approve->callback([] {
    owner_client(flags).approve(address);
    std::cout << fmt::format("node {} is approved\n", address);
  });
  logs->callback([] { std::cout << owner_client(flags).node_logs(address, lines); });
  task->callback([] {
    const int64_t id = owner_client(flags).create_task(role, read_file(task_config), task_node);
    std::cout << fmt::format("task {} ({}) created\n", id, role);
  });
}

}  // namespace

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
  static orchestrator::NginxFront front;
  static std::string nginx_out;
  auto* nginx =
      cmd->add_subcommand("nginx-config",
                          "Write nginx.conf for nginx in front of this orchestrator (slow clients, "
                          "header and body limits, connections per IP)");
  nginx->add_option("--out", nginx_out, "directory for nginx.conf, its logs and temp files")
      ->required();
  nginx->add_option("--listen", front.listen, "where nginx listens, HOST:PORT")
      ->capture_default_str();
  nginx
      ->add_option("--header-timeout-s", front.header_timeout_s,
                   "seconds a client has to send a request's headers")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  nginx->fallthrough();  // CONFIG and --set may follow the subcommand
  nginx->callback([] {
    const Config config = flags.resolve();
    const auto options = orchestrator::api_options(config, fs::current_path());
    if (options.port == 0)
      fail("orchestrator.port", "is 0 (any free port): nginx needs the port it will listen on");
    front.upstream = fmt::format("{}:{}", options.host, options.port);
    front.max_request_bytes = options.max_request_bytes;
    front.max_upload_bytes = options.max_upload_bytes;
    const fs::path conf = orchestrator::write_nginx_front_config(front, nginx_out);
    std::cout << "wrote " << conf.string() << ": nginx on " << front.listen
              << " in front of the orchestrator on " << front.upstream << "\nrun: nginx -p "
              << fs::absolute(nginx_out).string() << " -c " << conf.string()
              << "\nand set orchestrator.trusted_proxies to the address nginx connects from "
                 "(e.g. [\"127.0.0.1\"])\n";
  });
  add_owner_commands(cmd);
  cmd->callback([cmd, nginx] {
    for (const char* sub : {"stake", "approve", "task", "logs"}) {
      if (cmd->get_subcommand(sub)->parsed()) return;
    }
    if (nginx->parsed()) return;
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
