// Environment flags (see env_flags.h).
#include "cli/env_flags.h"

#include "env/registry.h"

namespace trellis::cli {

Config EnvFlags::config() const {
  std::vector<std::filesystem::path> files(config_files.begin(), config_files.end());
  Config c = Config::resolve(files, overrides);
  if (!env.empty()) c.apply_override("env.name=" + env);
  return c;
}

std::unique_ptr<env::Environment> EnvFlags::make() const {
  const Config c = config();
  return env::make_environment(c.get<std::string>("env.name"), env::EnvSettings::from_config(c));
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

}  // namespace trellis::cli
