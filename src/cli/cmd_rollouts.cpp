// `trellis rollouts inspect FILE [--rows N]`: prints a rollout file's schema, row groups,
// metadata, summary statistics and first rows (src/rollout/inspect.h).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "common/files.h"
#include "rollout/inspect.h"

namespace trellis::cli {

void add_rollouts_commands(CLI::App& app) {
  auto* rollouts = app.add_subcommand("rollouts", "Rollout files (Parquet)");
  rollouts->require_subcommand(1);
  auto* inspect = rollouts->add_subcommand(
      "inspect", "Print a rollout file's schema, row groups, metadata, statistics and first rows");
  struct Args {
    std::string file;
    size_t rows = 5;
  };
  auto args = std::make_shared<Args>();
  inspect->add_option("FILE", args->file, "the rollout file (.parquet)")->required();
  inspect->add_option("--rows", args->rows, "how many rows to print (default 5)");
  inspect->callback([args] {
    const std::string bytes = read_file(args->file);
    std::cout << rollout::inspect_rollout_file(bytes, args->file, args->rows);
  });
}

}  // namespace trellis::cli
