// The inference worker behind `trellis infer` (untrusted): holds the newest policy version it can
// fetch, asks the orchestrator for work (a step, a submission number and a number of prompt
// groups: admission control, orchestrator/admission.h) and waits while there is none, draws its
// prompts by fixed data sampling (specs/toploc.md §5) from (its address, step, submission
// number), generates G completions per prompt with the rollout engine, scores them, computes
// group advantages, writes one signed Parquet file per assignment and uploads it.
// With infer.partial_rollouts it runs C3PO++ instead (partial_rollouts.h): Ω completions stay in
// flight across policy versions and each file takes the next whole groups.
// It survives an orchestrator restart (retries with the same file; asking again returns its open
// work) and stops when the run is done or on SIGINT/SIGTERM.
#pragma once

#include <atomic>
#include <filesystem>

#include "common/config.h"
#include "model/compute.h"

namespace trellis::pipeline {

// Runs until the orchestrator reports the run done or `stop` becomes true.
void run_inference_worker(const Config& config, const std::filesystem::path& run_dir,
                          const model::Compute& compute, const std::atomic<bool>& stop);

}  // namespace trellis::pipeline
