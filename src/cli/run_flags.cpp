#include "cli/run_flags.h"

#include "cli/commands.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/source_address.h"

namespace trellis::cli {

void ComputeOverrides::add_to(CLI::App* cmd) {
  cmd->add_option("--device", device, "cpu | cuda (overrides compute.device)");
  cmd->add_option("--dtype", dtype, "compute dtype: auto | bf16 | fp32 (overrides compute.dtype)");
  cmd->add_option("--threads", threads,
                  "CPU threads for tensor math, 0 = every core (overrides compute.threads)")
      ->check(CLI::Range(0, 1 << 16));
}

void ComputeOverrides::apply(std::vector<std::string>& overrides) const {
  if (!device.empty()) overrides.push_back("compute.device=" + device);
  if (!dtype.empty()) overrides.push_back("compute.dtype=" + dtype);
  if (threads >= 0) overrides.push_back("compute.threads=" + std::to_string(threads));
}

Config RunFlags::resolve() const {
  std::vector<std::filesystem::path> files(configs.begin(), configs.end());
  const auto saved = std::filesystem::path(run_dir) / "config.toml";
  if (resume && files.empty() && !run_dir.empty() && std::filesystem::exists(saved)) {
    files = {saved};
  }
  std::vector<std::string> all = overrides;
  compute.apply(all);
  Config config = Config::resolve(files, all);
  if (!run_dir.empty()) config.set_string("run.dir", run_dir);
  set_source_address(config);
  if (resume && config.get<std::string>("run.dir").empty()) {
    fail("--resume", "name the run to resume with --run-dir DIR (or run.dir)");
  }
  return config;
}

void add_run_flags(CLI::App* cmd, RunFlags& flags) {
  cmd->add_option("config", flags.configs, "TOML configuration files, applied left to right")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", flags.overrides, "override one key: section.key=value (repeatable)");
  flags.compute.add_to(cmd);
  cmd->add_option("--run-dir", flags.run_dir,
                  "run directory (default: runs/<run.name>-<UTC timestamp>/)");
  cmd->add_flag("--resume", flags.resume,
                "continue the run in --run-dir from its newest checkpoint (CONFIG defaults to its "
                "config.toml)");
}

model::Compute setup_compute(const Config& config) {
  ComputeFlags flags;
  flags.device = config.get<std::string>("compute.device");
  flags.dtype = config.get<std::string>("compute.dtype");
  flags.threads = static_cast<int>(config.get_at_least<int64_t>("compute.threads", 0));
  try {
    return setup_compute(flags);
  } catch (const Error& e) {
    throw Error(e.what(), "[compute]");
  }
}

}  // namespace trellis::cli
