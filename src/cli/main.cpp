// trellis: one binary, one subcommand per role or tool. Parses flags, runs the command, and turns
// any Error into `error: <what> (<where>)` and a non-zero exit status.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "common/error.h"
#include "common/exception_message.h"
#include "common/logging.h"

namespace trellis::cli {

std::filesystem::path self_binary() { return std::filesystem::read_symlink("/proc/self/exe"); }

}  // namespace trellis::cli

int main(int argc, char** argv) {
  CLI::App app{
      "Trellis: decentralized, asynchronous RL post-training of language models.\n"
      "A trusted trainer, untrusted inference workers, validators, relays and an orchestrator;\n"
      "`trellis <command> --help` explains each command.",
      "trellis"};
  app.set_version_flag("--version", std::string("trellis ") + TRELLIS_VERSION);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")
      ->capture_default_str();
  app.require_subcommand(1);
  app.fallthrough();

  trellis::cli::add_config_commands(app);
  trellis::cli::add_model_commands(app);
  trellis::cli::add_generate_command(app);
  trellis::cli::add_serve_command(app);
  trellis::cli::add_env_commands(app);
  trellis::cli::add_eval_commands(app);
  trellis::cli::add_sft_command(app);
  trellis::cli::add_rl_command(app);
  trellis::cli::add_rollouts_commands(app);
  trellis::cli::add_orchestrator_command(app);
  trellis::cli::add_report_command(app);
  trellis::cli::add_pipeline_commands(app);
  trellis::cli::add_run_commands(app);
  trellis::cli::add_shardcast_commands(app);
  trellis::cli::add_validate_commands(app);
  trellis::cli::add_ledger_commands(app);
  trellis::cli::add_discovery_command(app);
  trellis::cli::add_node_command(app);
  trellis::cli::add_bench_commands(app);

  try {
    app.parse_complete_callback([&] { trellis::set_log_level(log_level); });
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const trellis::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", trellis::message_of(e).c_str());
    return 1;
  }
  return 0;
}
