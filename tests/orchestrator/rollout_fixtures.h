// Rollout files for orchestrator tests: prompt groups with chosen rewards (equal rewards = a group
// without signal), encoded and signed the way a worker does it.
#pragma once

#include <string>
#include <vector>

#include "common/identity.h"
#include "rollout/rollout_file.h"
#include "rollout/signing.h"

namespace trellis::test {

struct FileSpec {
  std::string run_id;
  std::string node_address;
  int32_t step = 0;
  int32_t submission = 0;
  int32_t version = 0;  // policy version of every completion token
};

// One group (group_index `index`) with one completion per reward.
inline std::vector<rollout::RolloutRecord> group(const FileSpec& spec, int32_t index,
                                                 const std::vector<float>& rewards) {
  float mean = 0;
  for (float r : rewards) mean += r / static_cast<float>(rewards.size());
  std::vector<rollout::RolloutRecord> rows;
  for (size_t i = 0; i < rewards.size(); ++i) {
    rollout::RolloutRecord r;
    r.run_id = spec.run_id;
    r.node_address = spec.node_address;
    r.step = spec.step;
    r.submission = spec.submission;
    r.task_id = "task-" + std::to_string(index);
    r.group_index = index;
    r.prompt_tokens = {1, 2, 3, index};
    r.completion_tokens = {4, 5, 6, static_cast<int32_t>(i)};
    r.completion_logprobs = {-0.5f, -0.25f, -1.0f, -2.0f};
    r.token_versions = std::vector<int32_t>(4, spec.version);
    r.seed = 1000 * index + static_cast<int64_t>(i);
    r.temperature = 1;
    r.finish_reason = i % 2 == 0 ? "eos" : "length";
    r.reward = rewards[i];
    r.task_reward = rewards[i];
    r.advantage = rewards[i] - mean;
    rows.push_back(std::move(r));
  }
  return rows;
}

// A file of groups, one per entry of `groups` (each the rewards of its completions), signed by
// `signer`.
inline std::string signed_file(const FileSpec& spec, const std::vector<std::vector<float>>& groups,
                               const Identity& signer) {
  std::vector<rollout::RolloutRecord> rows;
  for (size_t g = 0; g < groups.size(); ++g) {
    auto more = group(spec, static_cast<int32_t>(g), groups[g]);
    rows.insert(rows.end(), more.begin(), more.end());
  }
  return rollout::encode_rollout_file(rows, {{"trellis.model", "test"}},
                                      rollout::sign_body_with(signer));
}

}  // namespace trellis::test
