// SIGINT/SIGTERM as a flag: long-running roles (trainer, worker, orchestrator, run) poll it and
// shut down cleanly between units of work instead of dying mid-write.
#pragma once

#include <atomic>

namespace trellis::cli {

// Installs the handlers (once) and returns the flag they set.
const std::atomic<bool>& stop_requested();

}  // namespace trellis::cli
