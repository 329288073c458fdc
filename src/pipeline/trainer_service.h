// The distributed trainer behind `trellis trainer` (trusted). For step s it waits until the
// orchestrator lists accepted files for s holding rl.batch_size samples from groups with signal,
// downloads and checks them (SHA-256 as listed, schema), discards groups sampled by a policy
// older than s − async_level (counted), recomputes the group advantages from the rewards, trains
// exactly as the single-process loop (rl::Trainer on the same groups in acceptance order), then
// publishes policy version s + 1 to the policy directory and the orchestrator. Per-step metrics
// (specs/rl.md §8, plus the trainer's idle time) go to <run>/metrics.jsonl and the console;
// checkpoints to <run>/checkpoints every trainer.checkpoint_every steps, and --resume continues
// from the newest (accepted files stay in the store, so the resumed steps see the same data).
#pragma once

#include <atomic>
#include <filesystem>

#include "common/config.h"
#include "model/compute.h"
#include "rl/process_group.h"

namespace trellis::pipeline {

// Runs as rank 0 of `group` (the other ranks run rl::run_follower).
void run_trainer_service(const Config& config, const std::filesystem::path& run_dir, bool resume,
                         const model::Compute& compute, rl::ProcessGroup& group,
                         const std::atomic<bool>& stop);

}  // namespace trellis::pipeline
