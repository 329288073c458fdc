// Length reward (see length_reward.h).
#include "env/length_reward.h"

#include <cmath>
#include <cstdlib>

#include "common/config.h"
#include "common/error.h"
#include "common/rng.h"

namespace trellis::env {

LengthReward LengthReward::from_config(const Config& config) {
  LengthReward r;
  r.targets = config.get_list<int64_t>("env.length.targets");
  r.alpha = config.get<double>("env.length.alpha");
  for (int64_t t : r.targets) {
    if (t <= 0) fail("env.length.targets", "targets must be positive token counts, got {}", t);
  }
  if (!(r.alpha >= 0) || !std::isfinite(r.alpha)) {
    fail("env.length.alpha", "alpha must be a finite number >= 0, got {}", r.alpha);
  }
  return r;
}

int64_t LengthReward::draw_target(uint64_t seed) const {
  if (targets.empty()) return 0;
  RandomStream rng(seed, /*stream=*/0x4c454e);  // "LEN": independent of other draws from seed
  return targets[rng.uniform_int(0, static_cast<int64_t>(targets.size()) - 1)];
}

double LengthReward::apply(double task_reward, int64_t target, int64_t length) const {
  if (target <= 0) return task_reward;
  return task_reward - alpha * static_cast<double>(std::llabs(target - length));
}

std::string length_sentence(int64_t target) {
  return fmt::format("Think for {} tokens before giving a response.", target);
}

}  // namespace trellis::env
