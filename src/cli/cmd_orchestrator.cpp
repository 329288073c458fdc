// `trellis orchestrator [CONFIG...] [--set k=v ...] [--run-dir DIR]`: the orchestrator's HTTP
// API (orchestrator/api.h) over the state and rollout store in [orchestrator] data_dir (default:
// the run directory). Writes its URL to <data_dir>/orchestrator.url once listening, logs every
// submission decision, and runs until SIGINT or SIGTERM, then stops cleanly. Restarting it on the
// same run directory carries on with the same run ID, step counter and accepted files.
//
// `trellis orchestrator nginx-config [CONFIG...] --out DIR [--listen HOST:PORT]`: nginx.conf for
// nginx in front of it on the open internet (orchestrator/nginx_front.h).
#include <chrono>
#include <iostream>
#include <thread>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/stop_signal.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/run_dir.h"
#include "orchestrator/api.h"
#include "orchestrator/nginx_front.h"

namespace trellis::cli {
namespace fs = std::filesystem;

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
  cmd->callback([nginx] {
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
