// Conversion between the rollout engine's groups (rl::RolloutGroup) and rollout-file rows
// (rollout::RolloutRecord): a worker writes its groups as rows, the trainer reads rows back into
// groups. Both directions keep exactly what the trainer uses: tokens, behaviour log-probs,
// per-token versions, temperature, rewards, finish reason.
#pragma once

#include <string>
#include <vector>

#include "env/task.h"
#include "rl/rollouts.h"
#include "rollout/rollout_record.h"

namespace trellis::pipeline {

// Where a submission's rows come from (the columns every row repeats).
struct SubmissionKey {
  std::string run_id, node_address;
  int32_t step = 0, submission = 0;
};

// Rows of `groups` (advantages already set), group g for tasks[g].
std::vector<rollout::RolloutRecord> to_records(const SubmissionKey& key,
                                               const std::vector<rl::RolloutGroup>& groups,
                                               const std::vector<env::Task>& tasks);

// A row as a rollout (the engine's finish names: eos -> stop, length -> length).
rl::Rollout from_record(const rollout::RolloutRecord& row);

}  // namespace trellis::pipeline
