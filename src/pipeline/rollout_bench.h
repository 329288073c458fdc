// Rollout-phase benchmark behind `trellis bench rollouts`: the rollout phase of RL steps on a fixed
// policy, done the way a plain worker does it and the way a C3PO++ worker does (specs/rl.md §6), at
// the same concurrency, on the same prompts by fixed data sampling. Each step needs
// `groups_per_step` whole groups and ends with a new policy version (the same weights), so C3PO++
// pays its re-prefill of what is in flight, as in a real run. The trainer is left out: this is the
// time Ring-1T's ≈2.5× speed-up is about, free of the noise of a training run and its shrinking
// lengths.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/config.h"
#include "model/transformer.h"

namespace trellis::pipeline {

struct RolloutBenchOptions {
  int64_t steps = 10;
  int64_t groups_per_step = 16;  // rl.batch_size / rl.group_size by default
  bool partial = false;          // C3PO++ (infer.inflight_completions, token_budget, max_retention)
  bool proofs = false;           // build TOPLOC proofs while decoding, as a worker does
};

struct RolloutBenchResult {
  int64_t steps = 0, groups = 0;
  int64_t tokens = 0;     // generated tokens (completions of dropped groups included)
  int64_t forwards = 0;   // engine forwards
  int64_t prefilled = 0;  // prompt and re-prefilled prefix tokens
  int64_t dropped_groups = 0;
  double seconds = 0;            // all steps, generation and scoring
  double completion_tokens = 0;  // mean length of the completions in the kept groups
  int64_t proof_bytes = 0;       // of the kept groups' rollouts
  double proving_seconds = 0;    // thread time spent building proofs
  double adding_seconds = 0;     // thread time spent taking hidden rows in for them
};

// The rollout phase with the [rl], [env] and [infer] settings of `config` on `model` (its
// tokenizer and chat template come from `model_dir`). on_step(step, seconds) after each step.
RolloutBenchResult bench_rollouts(model::Transformer& model, const std::string& model_dir,
                                  const Config& config, const RolloutBenchOptions& options,
                                  const std::function<void(int64_t, double)>& on_step = {});

}  // namespace trellis::pipeline
