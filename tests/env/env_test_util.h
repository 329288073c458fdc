// Helpers shared by the environment tests: the generator loop every environment is checked with,
// the validate() error of a hand-written verification_info, answers scored 0 for a named reason,
// and sandbox limits for the sandbox and code tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "env/environment.h"
#include "env/sandbox.h"
#include "error_of.h"

namespace trellis::test {

// Limits generous enough that a test's program ends by the limit the test means to hit.
inline env::SandboxLimits test_limits(double cpu_seconds = 10, double wall_seconds = 60) {
  env::SandboxLimits l;
  l.cpu_seconds = cpu_seconds;
  l.wall_seconds = wall_seconds;
  return l;
}

inline std::string tagged(const std::string& answer) { return "<answer>" + answer + "</answer>"; }

// The message of the Error that validate() throws for a task with `info` read at `where` ("" when
// it is valid).
inline std::string validation_error(const env::Environment& env, Json info,
                                    const std::string& where) {
  env::Task t;
  t.verification_info = std::move(info);
  return error_of([&] { env.validate(t, where); });
}

// Tasks of every difficulty for seeds 0..seeds-1: each validates and its reference solution scores
// 1; then `check` looks further at it.
inline void for_each_generated(const env::Environment& env, uint64_t seeds,
                               const std::function<void(const env::Task&)>& check) {
  for (int difficulty = env::kMinDifficulty; difficulty <= env::kMaxDifficulty; ++difficulty) {
    for (uint64_t seed = 0; seed < seeds; ++seed) {
      const env::Task t = env.generate(seed, difficulty);
      SCOPED_TRACE(t.task_id);
      EXPECT_NO_THROW(env.validate(t, "generated"));
      ASSERT_TRUE(t.solution);
      const env::Score s = env.score(t, *t.solution);
      EXPECT_EQ(s.reward, 1.0) << s.reason;
      check(t);
    }
  }
}

// Each (completion, reason) scores 0, without throwing, with a reason that contains `reason`.
inline void expect_zero_scores(const env::Environment& env, const env::Task& t,
                               const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [completion, reason] : cases) {
    env::Score s;
    EXPECT_NO_THROW(s = env.score(t, completion));
    EXPECT_EQ(s.reward, 0.0) << completion.substr(0, 60);
    EXPECT_NE(s.reason.find(reason), std::string::npos) << s.reason;
  }
}

}  // namespace trellis::test
