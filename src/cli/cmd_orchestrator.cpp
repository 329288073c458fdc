// Placeholder until the command lands (issue 6 work in progress).
#include "cli/commands.h"

namespace trellis::cli {

void add_orchestrator_command(CLI::App& app) {}

}  // namespace trellis::cli
