// Rollouts: G completions per task from the rollout engine, each scored by the task's environment
// (task reward, then the optional length penalty). Shared by `trellis rl` (which trains on them),
// `trellis eval` and `trellis filter`.
//
// Prompts are the environment's chat messages rendered with the model's chat template (plain text
// joined by blank lines when the model has none). Completion j of task t samples with seed
// seed + t*G + j, so every sample is reproducible on its own. Scoring runs on worker threads, off
// the engine's loop, because the code environment's sandbox takes tens of milliseconds per test.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/json.h"
#include "engine/engine.h"
#include "env/environment.h"
#include "env/length_reward.h"
#include "model/prompting.h"
#include "rl/sequence_logprobs.h"
#include "toploc/proof_builder.h"

namespace trellis::rl {

struct Rollout {
  Sequence sequence;              // prompt and completion tokens; the sampling temperature
  std::vector<float> logprobs;    // behaviour log-prob of each completion token
  std::vector<int64_t> versions;  // the policy version that sampled each token
  uint64_t seed = 0;              // the sample seed
  std::string finish;             // stop | length | abort | purged
  std::string text;               // the completion decoded (specials skipped)
  double task_reward = 0;         // the verifier's, in [0, 1]
  double reward = 0;              // task reward minus the length penalty
  std::string reason;             // the verifier's explanation
  double advantage = 0;           // set by the trainer's loop
  std::string proof;              // TOPLOC chunk proofs (when RolloutOptions::proofs is set)

  int64_t tokens() const { return static_cast<int64_t>(sequence.completion.size()); }
};

// A rollout's trained fields as JSON and back (checkpoints of pending batches, and the batch the
// trainer's rank 0 sends the others): prompt, completion, temperature, logprobs, versions, seed,
// finish, rewards and advantage; numbers round-trip exactly.
Json rollout_json(const Rollout& r);
Rollout rollout_from_json(const Json& j);

struct RolloutGroup {
  int64_t task_index = 0;
  int64_t length_target = 0;  // 0 = no length reward
  std::vector<Rollout> rollouts;
  int64_t passed() const;  // rollouts with task reward 1
};

struct RolloutOptions {
  int64_t group_size = 1;  // G: completions per task
  int64_t max_tokens = 1024;
  engine::SamplingParams sampling;
  uint64_t seed = 0;
  std::string system_prompt;  // "" = the environment's own
  env::LengthReward length;   // off unless targets are set
  // A completion cut at max_tokens gets reward 0 (task_reward keeps the environment's score): an
  // answer that never ended is not an answer, and without this the policy drifts to not stopping.
  bool zero_truncated = false;
  // When set, completions ask the engine for their hidden rows, which the engine's hidden-row
  // sink must feed to this builder (feed_proofs), and each rollout carries its TOPLOC proof.
  toploc::ProofBuilder* proofs = nullptr;
  // Called after each engine step: (completions scored, completions in all, tokens generated).
  std::function<void(int64_t done, int64_t total, int64_t tokens)> on_progress;
};

// The reward RL trains on for a completion of `tokens` tokens that ended with `finish` ("stop",
// "length", "abort"): the environment's task reward with the length reward applied, or 0 when
// options.zero_truncated and the completion was cut at max_tokens.
double training_reward(const RolloutOptions& options, double task_reward, int64_t length_target,
                       const std::string& finish, int64_t tokens);

// The prompt of a task as token ids (chat template when the model has one).
std::vector<int32_t> encode_prompt(const model::Prompting& prompting,
                                   const std::vector<env::Message>& messages);

// Makes `engine`'s hidden-row sink feed `proofs`, keyed as the rollout collector takes them
// (RolloutOptions::proofs). Once per engine; `proofs` must outlive it.
void feed_proofs(engine::Engine& engine, toploc::ProofBuilder& proofs);

// Runs every task to completion (a RolloutCollector over the whole batch); groups in task order.
// Aborted completions are not scored and get reward 0.
std::vector<RolloutGroup> generate_rollouts(engine::Engine& engine,
                                            const model::Prompting& prompting,
                                            const env::Environment& environment,
                                            const std::vector<env::Task>& tasks,
                                            const RolloutOptions& options);

}  // namespace trellis::rl
