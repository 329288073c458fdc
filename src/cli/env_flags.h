// Flags shared by the commands that use an environment (`env`, `eval`, `filter`): which
// environment, and the [env] configuration (config files, --set overrides) that sets its sandbox,
// system prompt and length reward.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "env/environment.h"

namespace trellis::cli {

struct EnvFlags {
  std::string env;  // "" = env.name from the configuration
  std::vector<std::string> config_files, overrides;

  Config config() const;
  // The chosen environment, configured from config().
  std::unique_ptr<env::Environment> make() const;
};

// --env NAME, --config FILE (repeatable), --set section.key=value (repeatable).
void add_env_flags(CLI::App* cmd, EnvFlags& flags, bool env_required);

}  // namespace trellis::cli
