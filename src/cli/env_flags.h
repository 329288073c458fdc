// Flags shared by the commands that use an environment (`env`, `eval`, `filter`): which
// environment, and the [env] configuration (config files, --set overrides) that sets its sandbox,
// system prompt and length reward.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "env/environment.h"

namespace trellis::cli {

struct EnvFlags {
  std::string env;     // "" = env.name from the configuration
  int difficulty = 0;  // 0 = env.difficulty from the configuration
  std::vector<std::string> config_files, overrides;

  // Defaults <- config files <- --set overrides, with env.name set to --env when given. The
  // environment is env::make_environment(config()).
  Config config() const;
  // --difficulty, else env.difficulty of `config`; Error unless in [1, 10].
  int resolved_difficulty(const Config& config) const;
};

// --env NAME, --config FILE (repeatable), --set section.key=value (repeatable).
void add_env_flags(CLI::App* cmd, EnvFlags& flags, bool env_required);
// --difficulty, for the commands that generate tasks.
void add_difficulty_flag(CLI::App* cmd, EnvFlags& flags);

}  // namespace trellis::cli
