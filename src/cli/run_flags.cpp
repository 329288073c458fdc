#include "cli/run_flags.h"

#include "common/error.h"
#include "common/logging.h"

namespace trellis::cli {

Config RunFlags::resolve() const {
  std::vector<std::filesystem::path> files(configs.begin(), configs.end());
  Config config = Config::resolve(files, overrides);
  if (!run_dir.empty()) {
    std::string quoted;  // a TOML basic string
    for (char c : run_dir)
      quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    config.apply_override("run.dir=\"" + quoted + "\"");
  }
  return config;
}

void add_run_flags(CLI::App* cmd, RunFlags& flags) {
  cmd->add_option("config", flags.configs, "TOML configuration files, applied left to right")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", flags.overrides, "override one key: section.key=value (repeatable)");
  cmd->add_option("--run-dir", flags.run_dir,
                  "run directory (default: runs/<run.name>-<UTC timestamp>/)");
}

model::Compute setup_compute(const Config& config) {
  const int64_t threads = config.get<int64_t>("compute.threads");
  if (threads < 0) fail("compute.threads", "must be >= 0 (0 = every core)");
  model::init_compute_runtime(static_cast<int>(threads));
  try {
    return model::resolve_compute(config.get<std::string>("compute.device"),
                                  config.get<std::string>("compute.dtype"));
  } catch (const Error& e) {
    throw Error(e.what(), "[compute]");
  }
}

}  // namespace trellis::cli
