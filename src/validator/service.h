// The validator behind `trellis validate` (trusted): claims the oldest submission waiting for a
// verdict from the orchestrator (a lease, so that several validators share the queue), downloads
// it, judges it (validator.h) with the policy versions it claims (fetched through SHARDCAST,
// policy_cache.h) and posts accept or reject with the reason. A submission it cannot judge (a
// policy that cannot be fetched, its own non-finite rows) gets no verdict: the lease runs out and
// it is offered again. Runs until the run is done or SIGINT/SIGTERM.
#pragma once

#include <atomic>
#include <filesystem>

#include "common/config.h"
#include "model/compute.h"

namespace trellis::validator {

// `run_dir` holds the validator's key (unless validator.key_file names one) and the policies it
// fetches.
void run_validator(const Config& config, const std::filesystem::path& run_dir,
                   const model::Compute& compute, const std::atomic<bool>& stop);

}  // namespace trellis::validator
