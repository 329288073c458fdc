// Length reward (L1, Aggarwal & Welleck 2025; INTELLECT-2 §3.2; specs/rl.md §4): a target T is
// drawn from a small set for each prompt, the prompt asks "Think for T tokens before giving a
// response.", and the reward becomes R = R_task - alpha * |T - length|.
//
// The total may fall below 0 by design (a correct answer far from its target loses to a correct
// answer near it); the task reward itself stays in [0, 1].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trellis {
class Config;
}

namespace trellis::env {

struct LengthReward {
  std::vector<int64_t> targets;  // empty = off
  double alpha = 0.0003;

  static LengthReward from_config(const Config& config);  // [env.length]; Error on bad values
  bool enabled() const { return !targets.empty(); }
  // The target for a prompt, drawn deterministically from `seed` (0 when off).
  int64_t draw_target(uint64_t seed) const;
  // R_task - alpha * |target - length| (R_task when target is 0).
  double apply(double task_reward, int64_t target, int64_t length) const;
};

// "Think for T tokens before giving a response."
std::string length_sentence(int64_t target);

}  // namespace trellis::env
