#include "rollout/rollout_record.h"

#include <cmath>

#include "common/error.h"

namespace trellis::rollout {

void check_record(const RolloutRecord& r, size_t row, const std::string& where) {
  const auto at = [&] { return fmt::format("{}, row {}", where, row); };
  const size_t n = r.completion_tokens.size();
  if (r.completion_logprobs.size() != n)
    fail(at(), "completion_logprobs has {} entries for {} completion tokens",
         r.completion_logprobs.size(), n);
  if (r.token_versions.size() != n)
    fail(at(), "token_versions has {} entries for {} completion tokens", r.token_versions.size(),
         n);
  if (r.finish_reason != "eos" && r.finish_reason != "length")
    fail(at(), "finish_reason must be eos or length, got '{}'", r.finish_reason);
  if (r.proof.size() % 258 != 0)
    fail(at(), "proof has {} bytes, not a multiple of 258 (one TOPLOC proof per chunk)",
         r.proof.size());
  for (float v : {r.temperature, r.reward, r.task_reward, r.length_penalty, r.advantage})
    if (!std::isfinite(v)) fail(at(), "a float column is not finite");
  for (float lp : r.completion_logprobs)
    if (!std::isfinite(lp) && lp != -INFINITY) fail(at(), "completion_logprobs holds NaN");
}

}  // namespace trellis::rollout
