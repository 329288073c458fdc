// Placeholder until the command lands (issue 6 work in progress).
#include "cli/commands.h"

namespace trellis::cli {

void add_rollouts_commands(CLI::App& app) {}

}  // namespace trellis::cli
