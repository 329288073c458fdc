// The reward RL trains on (rl/rollouts.h): the length reward, and zero for truncated completions.
#include <gtest/gtest.h>

#include "rl/rollouts.h"

namespace trellis::rl {
namespace {

TEST(TrainingReward, TruncatedCompletionsScoreZeroOnlyWhenAsked) {
  RolloutOptions o;
  o.zero_truncated = true;
  EXPECT_EQ(training_reward(o, 0.75, 0, "length", 32), 0.0);
  EXPECT_EQ(training_reward(o, 0.75, 0, "stop", 32), 0.75);
  EXPECT_EQ(training_reward(o, 0.75, 0, "abort", 32), 0.75);
  o.zero_truncated = false;
  EXPECT_EQ(training_reward(o, 0.75, 0, "length", 32), 0.75);
}

TEST(TrainingReward, LengthRewardAppliesToFinishedCompletions) {
  RolloutOptions o;
  o.zero_truncated = true;
  o.length.targets = {100, 200};
  o.length.alpha = 0.001;
  // R_task - alpha * |target - length| = 1 - 0.001 * |100 - 140|.
  EXPECT_DOUBLE_EQ(training_reward(o, 1.0, 100, "stop", 140), 1.0 - 0.001 * 40);
  EXPECT_EQ(training_reward(o, 1.0, 100, "length", 140), 0.0);
}

}  // namespace
}  // namespace trellis::rl
