// C3PO++ budget-controlled partial rollouts for an inference worker (specs/rl.md §6; Ring-1T).
//
// A plain worker generates a submission's groups to the end, so its batch shrinks to the few
// longest completions while the rest of the hardware idles: with a long-tailed length
// distribution the tail sets the pace. The pool instead keeps Ω completions in flight: each
// iteration refills it with newly drawn prompt groups, runs the engine until the completions that
// finished in the iteration hold Φ tokens, and hands back the groups that are now whole.
// Unfinished completions stay in flight; when the worker loads a new policy version they continue
// under it (the engine re-prefills prompt + prefix and records each token's version), and those
// that would span more than σ versions are purged, taking their whole group with them.
//
// Prompts come from fixed data sampling (rollout/data_sampling.h) under draw coordinates of their
// own — (step at the refill, draw number, place) — since a group is submitted in whatever file is
// open when it completes; the worker writes them into the task_id.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "common/config.h"
#include "engine/engine.h"
#include "env/environment.h"
#include "model/prompting.h"
#include "pipeline/fixed_data_sampler.h"
#include "rl/rollout_collector.h"
#include "rl/rollouts.h"
#include "rollout/data_sampling.h"

namespace trellis::pipeline {

struct PartialRolloutOptions {
  int64_t inflight = 32;       // Ω: completions in flight after each refill
  int64_t token_budget = 256;  // Φ: tokens of completions finished per iteration
  int64_t max_retention = 3;   // σ: for the engine (EngineOptions::max_retention)

  // [infer] inflight_completions (0 = groups_per_submission × rl.group_size), token_budget and
  // max_retention (0 = rl.async_level + 1, the longest span the async window accepts).
  static PartialRolloutOptions from_config(const Config& config);
};

// The engine a worker runs: a plain worker decodes one file's groups at once
// (infer.groups_per_submission × rl.group_size), a C3PO++ one Ω with retention σ; in FP8 when
// rl.precision rolls out in FP8.
engine::EngineOptions worker_engine_options(const Config& config, bool partial,
                                            int64_t vocab_limit);

// A whole group and where its prompt was drawn.
struct DrawnGroup {
  rl::RolloutGroup group;
  env::Task task;
  rollout::DrawCoordinates draw;
  int64_t oldest_version() const;  // the oldest policy version that sampled one of its tokens
};

struct IterationStats {
  int64_t purged_groups = 0;  // a completion spanned more than σ versions
  int64_t stale_groups = 0;   // aborted in flight: a token older than min_version
};

class PartialRolloutPool {
 public:
  // `engine` keeps its options (max_num_seqs >= Ω; max_retention = σ). rollout.seed is unused:
  // each draw has its own sampling seed.
  PartialRolloutPool(engine::Engine& engine, const model::Prompting& prompting,
                     const env::Environment& environment, const FixedDataSampler& sampler,
                     rl::RolloutOptions rollout, PartialRolloutOptions options);

  // One iteration for `step`: abort the groups in flight that hold a token older than
  // `min_version` (they can no longer be accepted: the async window has moved past them), refill
  // to Ω with prompts drawn for `step`, run to the budget, and return the groups completed
  // (those with a purged or aborted completion are dropped).
  std::vector<DrawnGroup> iterate(int64_t step, int64_t min_version,
                                  IterationStats* stats = nullptr);

  int64_t in_flight() const { return collector_.in_flight(); }

 private:
  struct Pending {
    env::Task task;
    rollout::DrawCoordinates draw;
  };
  engine::Engine& engine_;
  const FixedDataSampler& sampler_;
  int64_t group_size_;
  PartialRolloutOptions options_;
  rl::RolloutCollector collector_;
  std::map<int64_t, Pending> pending_;  // groups in flight by collector id
  std::map<int64_t, int64_t> draws_;    // the next draw number of each step
  std::set<int64_t> stale_;             // ids aborted for staleness, not yet taken
  int64_t next_id_ = 0;
};

}  // namespace trellis::pipeline
