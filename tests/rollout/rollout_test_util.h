// Sample rollout records for the rollout-file tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rollout/rollout_record.h"

namespace trellis::rollout::test_data {

// Row `i` of a deterministic sample: varied list lengths (including empty lists every 5th row),
// both finish reasons, a proof on every 3rd row, non-ASCII task ids.
inline RolloutRecord sample_record(int i) {
  RolloutRecord r;
  r.run_id = "run-" + std::to_string(i % 2);
  r.node_address = "ab12cd34ef56";
  r.step = 7 + i % 3;
  r.submission = i % 2;
  r.task_id = "task-" + std::to_string(i) + (i % 4 == 0 ? "-\xc3\xa9t\xc3\xa9" : "");
  r.group_index = i / 4;
  const int prompt = i % 5 == 0 ? 0 : 3 + i % 7;
  const int completion = i % 5 == 1 ? 0 : 1 + (i * 13) % 40;
  for (int t = 0; t < prompt; ++t) r.prompt_tokens.push_back(1000 * i + t);
  for (int t = 0; t < completion; ++t) {
    r.completion_tokens.push_back(t * 31 + i);
    r.completion_logprobs.push_back(-0.015625f * static_cast<float>(t + i));
    r.token_versions.push_back(t < completion / 2 ? r.step - 1 : r.step);
  }
  r.seed = (int64_t{1} << 40) + i * 1000003;
  r.temperature = i % 2 ? 1.0f : 0.7f;
  r.finish_reason = i % 3 ? "eos" : "length";
  r.reward = 0.25f * static_cast<float>(i % 5);
  r.task_reward = i % 2 ? 1.0f : 0.0f;
  r.length_penalty = 0.001f * static_cast<float>(i);
  r.target_length = i % 4 == 0 ? 0 : 512;
  r.advantage = static_cast<float>(i % 5) - 2.0f;
  if (i % 3 == 0) r.proof = std::string(258 * (1 + i % 2), static_cast<char>(i));
  return r;
}

inline std::vector<RolloutRecord> sample_records(int n) {
  std::vector<RolloutRecord> rows;
  for (int i = 0; i < n; ++i) rows.push_back(sample_record(i));
  return rows;
}

}  // namespace trellis::rollout::test_data
