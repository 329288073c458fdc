// The environments Trellis ships, by name. Adding one: a file in environments/ and one line in
// registry.cpp.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "env/environment.h"
#include "env/sandbox.h"

namespace trellis {
class Config;
}

namespace trellis::env {

// What environments may be configured with ([env.*] sections).
struct EnvSettings {
  SandboxLimits sandbox;  // the code environment's

  static EnvSettings from_config(const Config& config);
};

// Every registered name, in registry order.
std::vector<std::string> environment_names();
// The environment called `name`; Error listing the known names when there is none.
std::unique_ptr<Environment> make_environment(std::string_view name,
                                              const EnvSettings& settings = {});
// The environment named by env.name, configured by the [env.*] sections.
std::unique_ptr<Environment> make_environment(const Config& config);

}  // namespace trellis::env
