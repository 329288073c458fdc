// Task sampling: k completions per task from the rollout engine, each scored by the task's
// environment. Shared by `trellis eval` and `trellis filter`.
//
// Prompts are the environment's chat messages rendered with the model's chat template (plain text
// joined by blank lines when the model has none). Completion j of task t samples with seed
// seed + t*k + j, so every sample is reproducible on its own. Scoring runs on worker threads,
// off the engine's loop, because the code environment's sandbox takes tens of milliseconds per
// test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "env/environment.h"
#include "env/length_reward.h"
#include "model/prompting.h"

namespace trellis::cli {

struct TaskSamplingOptions {
  int64_t k = 1;  // completions per task
  int64_t max_tokens = 1024;
  engine::SamplingParams sampling;
  uint64_t seed = 0;
  std::string system_prompt;  // "" = the environment's own
  env::LengthReward length;   // off unless targets are set
};

struct Sample {
  std::string text;
  int64_t tokens = 0;
  std::string finish_reason;
  double task_reward = 0;  // the verifier's, in [0, 1]
  double reward = 0;       // task reward minus the length penalty
  std::string reason;
};

struct SampledTask {
  int64_t length_target = 0;  // 0 = no length reward
  std::vector<Sample> samples;
  int64_t passed() const;  // samples with task reward 1
};

// Runs every task to completion with a progress bar; results in task order.
std::vector<SampledTask> sample_tasks(engine::Engine& engine, const model::Prompting& prompting,
                                      const env::Environment& environment,
                                      const std::vector<env::Task>& tasks,
                                      const TaskSamplingOptions& options);

}  // namespace trellis::cli
