// `trellis config show [FILE...] [--set section.key=value ...] [--section NAME]`
#include <iostream>

#include "cli/commands.h"
#include "common/config.h"

namespace trellis::cli {

void add_config_commands(CLI::App& app) {
  auto* config = app.add_subcommand("config", "Inspect configuration");
  config->require_subcommand(1);
  auto* show = config->add_subcommand(
      "show", "Print the resolved configuration: embedded defaults <- FILEs <- --set overrides");
  static std::vector<std::string> files, overrides;
  static std::string section;
  show->add_option("files", files, "TOML config files, applied left to right")
      ->check(CLI::ExistingFile);
  show->add_option("--set", overrides, "override one key: section.key=value (repeatable)");
  show->add_option("--section", section, "print only this section (e.g. rl, orchestrator)");
  show->callback([] {
    std::vector<std::filesystem::path> paths(files.begin(), files.end());
    const Config config = Config::resolve(paths, overrides);
    std::cout << (section.empty() ? config.to_toml() : config.to_toml(section));
  });
}

}  // namespace trellis::cli
