// Environment flags (see env_flags.h).
#include "cli/env_flags.h"

#include "env/environment.h"

namespace trellis::cli {

Config EnvFlags::config() const {
  std::vector<std::filesystem::path> files(config_files.begin(), config_files.end());
  Config c = Config::resolve(files, overrides);
  if (!env.empty()) c.apply_override("env.name=" + env);
  return c;
}

int EnvFlags::resolved_difficulty(const Config& config) const {
  const int d =
      difficulty > 0 ? difficulty : static_cast<int>(config.get<int64_t>("env.difficulty"));
  env::check_difficulty(d, "--difficulty");
  return d;
}

void add_env_flags(CLI::App* cmd, EnvFlags& flags, bool env_required) {
  auto* opt = cmd->add_option("--env", flags.env,
                              "environment (see `trellis env list`); default: env.name of the "
                              "configuration");
  if (env_required) opt->required();
  cmd->add_option("--config", flags.config_files,
                  "TOML config files ([env] section: system prompt, length reward, sandbox)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", flags.overrides, "override one key: section.key=value (repeatable)");
}

void add_difficulty_flag(CLI::App* cmd, EnvFlags& flags) {
  cmd->add_option("--difficulty", flags.difficulty,
                  "generator difficulty 1 (easiest) .. 10; default: env.difficulty of the "
                  "configuration");
}

}  // namespace trellis::cli
