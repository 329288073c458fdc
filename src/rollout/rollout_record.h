// One row of a rollout file (specs/rollout-format.md): a completion with everything the trainer
// and validators need, in plain C++ types so that the file format, the store and the orchestrator
// build without libtorch. The trainer and workers convert to and from rl::Rollout.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trellis::rollout {

struct RolloutRecord {
  std::string run_id;
  std::string node_address;  // submitting worker's Ed25519 public key, hex
  int32_t step = 0;          // trainer step the rollouts are for
  int32_t submission = 0;    // the worker's submission number within the step
  std::string task_id;
  int32_t group_index = 0;  // which prompt group in the file
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> completion_tokens;
  std::vector<float> completion_logprobs;  // one per completion token
  std::vector<int32_t> token_versions;     // one per completion token
  int64_t seed = 0;
  float temperature = 1;
  std::string finish_reason;  // eos | length
  float reward = 0;
  float task_reward = 0;
  float length_penalty = 0;
  int32_t target_length = 0;
  float advantage = 0;
  std::string proof;  // TOPLOC chunk proofs, 258 bytes each (empty until validators exist)

  bool operator==(const RolloutRecord&) const = default;
};

// Footer key/value metadata, in file order.
using KeyValues = std::vector<std::pair<std::string, std::string>>;

// Error naming `where` and the row when a record breaks the schema's own rules: list lengths that
// disagree (logprobs and versions one per completion token), a finish_reason other than eos or
// length, a proof whose length is not a multiple of 258, non-finite floats.
void check_record(const RolloutRecord& record, size_t row, const std::string& where);

}  // namespace trellis::rollout
