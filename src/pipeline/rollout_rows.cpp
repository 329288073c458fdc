#include "pipeline/rollout_rows.h"

namespace trellis::pipeline {

std::vector<rollout::RolloutRecord> to_records(const SubmissionKey& key,
                                               const std::vector<rl::RolloutGroup>& groups,
                                               const std::vector<env::Task>& tasks) {
  std::vector<rollout::RolloutRecord> rows;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& r : groups[g].rollouts) {
      rollout::RolloutRecord row;
      row.run_id = key.run_id;
      row.node_address = key.node_address;
      row.step = key.step;
      row.submission = key.submission;
      row.task_id = tasks[g].task_id;
      row.group_index = static_cast<int32_t>(g);
      row.prompt_tokens = r.sequence.prompt;
      row.completion_tokens = r.sequence.completion;
      row.completion_logprobs = r.logprobs;
      row.token_versions.assign(r.versions.begin(), r.versions.end());
      row.seed = static_cast<int64_t>(r.seed);
      row.proof = r.proof;
      row.temperature = static_cast<float>(r.sequence.temperature);
      // A worker submits only finished completions: an engine stop is an end token.
      row.finish_reason = r.finish == "length" ? "length" : "eos";
      row.reward = static_cast<float>(r.reward);
      row.task_reward = static_cast<float>(r.task_reward);
      row.length_penalty = static_cast<float>(r.task_reward - r.reward);
      row.target_length = static_cast<int32_t>(groups[g].length_target);
      row.advantage = static_cast<float>(r.advantage);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

rl::Rollout from_record(const rollout::RolloutRecord& row) {
  rl::Rollout r;
  r.sequence.prompt = row.prompt_tokens;
  r.sequence.completion = row.completion_tokens;
  r.sequence.temperature = row.temperature;
  r.logprobs = row.completion_logprobs;
  r.versions.assign(row.token_versions.begin(), row.token_versions.end());
  r.seed = static_cast<uint64_t>(row.seed);
  r.finish = row.finish_reason == "eos" ? "stop" : row.finish_reason;
  r.task_reward = row.task_reward;
  r.reward = row.reward;
  r.advantage = row.advantage;
  return r;
}

}  // namespace trellis::pipeline
