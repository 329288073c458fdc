// Properties every registered environment must have, checked over many generated tasks and random
// completions: generation is deterministic, generated tasks validate, reference solutions score 1,
// and whatever a model writes (random bytes, mangled solutions, other tasks' answers, huge or
// empty replies) gets a reward in [0, 1] with a reason, never an exception.
#include <gtest/gtest.h>

#include <cmath>

#include "common/rng.h"
#include "env/registry.h"

namespace trellis::env {
namespace {

class EveryEnvironment : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { env_ = make_environment(GetParam()); }
  // The code environment runs a sandboxed interpreter per completion: fewer trials keep it quick.
  int trials() const { return GetParam() == "code" ? 6 : 60; }
  std::unique_ptr<Environment> env_;
};

void expect_bounded(const Environment& env, const Task& task, const std::string& completion) {
  Score s;
  ASSERT_NO_THROW(s = env.score(task, completion))
      << env.name() << " threw on completion of " << completion.size() << " bytes";
  EXPECT_TRUE(std::isfinite(s.reward)) << env.name();
  EXPECT_GE(s.reward, 0.0) << env.name() << ": " << s.reason;
  EXPECT_LE(s.reward, 1.0) << env.name() << ": " << s.reason;
  EXPECT_FALSE(s.reason.empty()) << env.name() << " gave no reason";
}

std::string random_bytes(RandomStream& rng, int64_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng.uniform_int(0, 255));
  return s;
}

// The solution with a few characters replaced, removed or duplicated.
std::string mangle(RandomStream& rng, std::string s) {
  const int64_t edits = rng.uniform_int(1, 4);
  for (int64_t e = 0; e < edits && !s.empty(); ++e) {
    const auto at = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(s.size()) - 1));
    switch (rng.uniform_int(0, 2)) {
      case 0:
        s[at] = "0123456789+-*/()<>{}[]abcxyz ,.=\\\n"[rng.uniform_int(0, 34)];
        break;
      case 1:
        s.erase(at, 1);
        break;
      default:
        s.insert(at, s.substr(at, rng.uniform_int(1, 8)));
    }
  }
  return s;
}

TEST_P(EveryEnvironment, GenerationIsDeterministicAndSolutionsScoreOne) {
  for (int difficulty : {kMinDifficulty, 4, kMaxDifficulty}) {
    const auto tasks = generate_tasks(*env_, 4, /*seed=*/11, difficulty);
    const auto again = generate_tasks(*env_, 4, /*seed=*/11, difficulty);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      EXPECT_EQ(task_to_json(t), task_to_json(again[i]));
      EXPECT_EQ(t.env, env_->name());
      ASSERT_TRUE(t.solution) << t.task_id;
      EXPECT_NO_THROW(env_->validate(t, t.task_id));
      // What a dataset file would hold parses back to the same task.
      EXPECT_EQ(task_to_json(task_from_json(task_to_json(t), "round trip")), task_to_json(t));
      const Score s = env_->score(t, *t.solution);
      EXPECT_EQ(s.reward, 1.0) << t.task_id << ": " << s.reason << "\n" << *t.solution;
    }
    EXPECT_NE(tasks[0].task_id, tasks[1].task_id);
  }
}

TEST_P(EveryEnvironment, RewardsStayInUnitIntervalForAnyCompletion) {
  RandomStream rng(/*seed=*/GetParam().size());
  const auto tasks = generate_tasks(*env_, 8, /*seed=*/3, 5);
  for (int trial = 0; trial < trials(); ++trial) {
    const Task& task = tasks[trial % tasks.size()];
    const Task& other = tasks[(trial + 1) % tasks.size()];
    expect_bounded(*env_, task, mangle(rng, *task.solution));
    expect_bounded(*env_, task, *other.solution);
    expect_bounded(*env_, task, random_bytes(rng, rng.uniform_int(0, 300)));
    expect_bounded(*env_, task, *task.solution + random_bytes(rng, 20));
  }
  const Task& task = tasks[0];
  for (const std::string& hostile :
       {std::string(), std::string("<answer></answer>"), std::string("<answer>"),
        std::string(1 << 20, '('), std::string(1 << 20, '9'),
        "<answer>" + std::string(1 << 20, 'x') + "</answer>", std::string("\\boxed{") + "}}}",
        std::string("```python\n") + std::string(100000, '#') + "\n```",
        *task.solution + "\xff\xfe", std::string(2000, '{') + "<answer>1</answer>"}) {
    expect_bounded(*env_, task, hostile);
  }
}

TEST_P(EveryEnvironment, ValidateRejectsAnEmptyVerificationInfo) {
  Task t = generate_tasks(*env_, 1, 0, 1)[0];
  t.verification_info = Json::object();
  try {
    env_->validate(t, "tasks.jsonl:7");
    ADD_FAILURE() << env_->name() << " accepted a task without verification_info";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tasks.jsonl:7"), std::string::npos) << e.what();
  }
}

TEST_P(EveryEnvironment, DescribesItself) {
  EXPECT_EQ(env_->name(), GetParam());
  EXPECT_FALSE(env_->description().empty());
  // Every prompt carries the task; the system prompt comes first and an override replaces it.
  const Task t = generate_tasks(*env_, 1, 0, 2)[0];
  auto messages = env_->build_prompt(t, {.system_prompt = "S", .length_target = 100});
  ASSERT_GE(messages.size(), 2u);
  EXPECT_EQ(messages.front().role, "system");
  EXPECT_EQ(messages.front().content, "S");
  EXPECT_EQ(messages.back().role, "user");
  EXPECT_NE(messages.back().content.find(t.prompt), std::string::npos);
  EXPECT_NE(messages.back().content.find("Think for 100 tokens"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryEnvironment, ::testing::ValuesIn(environment_names()),
                         [](const auto& info) { return info.param; });

TEST(Registry, UnknownNamesListTheKnownOnes) {
  try {
    make_environment("chess");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("known: math, code, countdown"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace trellis::env
