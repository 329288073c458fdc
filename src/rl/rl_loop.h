// The single-process RL loop behind `trellis rl`: generate a batch with the rollout engine (G
// completions per prompt, seeds recorded), score it, compute group advantages, drop groups
// without signal, train, hand the new weights to the engine; repeat. No network: this loop is the
// reference that the distributed system (separate trainer and workers) must match.
//
// Asynchrony is reproduced exactly: with async_level = k, the batch for step s is sampled by the
// policy of step max(0, s - k) (the loop generates step s + k's batch right before training step
// s), so a run shows the effect of k-step-stale rollouts without any concurrency.
//
// Outputs go to the run directory: config.toml, metrics.jsonl (one line per step with the
// specs/rl.md §8 metrics), checkpoints/step_N (weights, optimizer, progress and the rollouts
// already generated for later steps), and one console line per step. A run resumes exactly from
// its newest checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>

#include "common/config.h"
#include "model/compute.h"
#include "rl/process_group.h"
#include "rl/rollouts.h"

namespace trellis::rl {

struct RlLoopConfig {
  int64_t steps = 50;
  int64_t batch_size = 64;  // samples per step from groups with signal
  int64_t group_size = 8;   // G
  int64_t async_level = 2;  // k
  int64_t max_tokens = 256;
  double temperature = 1.0;
  bool normalize_std = true;
  bool zero_truncated = true;        // completions cut at max_tokens score 0 (RolloutOptions)
  int64_t max_rounds = 8;            // generation rounds per step to fill the batch
  double behaviour_temperature = 0;  // experiments: the engine samples at this (0 = temperature)
  int64_t checkpoint_every = 10;     // 0 = only at the end
  int64_t keep_checkpoints = 3;
  uint64_t seed = 0;

  // [rl], [trainer] and [run]; Error naming the key when a value is unusable.
  static RlLoopConfig from_config(const Config& config);
};

// The rollout settings of an RL run: G, max_tokens, temperature and the truncation rule of `rl`,
// plus env.system_prompt and the length reward of `config` (seed left 0). Shared by `trellis rl`,
// the inference workers and `bench rollouts`.
RolloutOptions rollout_options(const RlLoopConfig& rl, const Config& config);

// Runs the loop as rank 0 of `group` (rl/trainer_ranks.h: the other ranks run run_follower);
// `resume` continues from the newest checkpoint under run_dir/checkpoints.
void run_rl(const Config& config, const std::filesystem::path& run_dir, bool resume,
            const model::Compute& compute, ProcessGroup& group);

}  // namespace trellis::rl
