// The whole-file checks of a validator (validator/file_checks.h) on a submission built the way an
// honest worker builds one (fixed data sampling, the run's prompt rendering, seeds, rewards from
// the verifier, group advantages), with the reference solutions as completions: it passes, and
// each single tampering is named by the check that catches it. Validator::validate adds the
// binding to (run, node, step, submission) and the node's signature.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "common/identity.h"
#include "common/json.h"
#include "env/registry.h"
#include "model/hf_config.h"
#include "model/presets.h"
#include "model/prompting.h"
#include "rl/advantages.h"
#include "rl/rl_loop.h"
#include "rollout/data_sampling.h"
#include "rollout/signing.h"
#include "validator/file_checks.h"
#include "validator/validator.h"

namespace trellis::validator {
namespace {

namespace fs = std::filesystem;

class FileChecks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("trellis_file_checks_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    model::init_model_dir(dir_, model::Arch::Qwen3, "tiny", 1);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override { make({}); }

  // The run: reverse_text, G = 4, two groups per file, the given overrides.
  void make(std::vector<std::string> overrides) {
    overrides.insert(overrides.end(),
                     {"env.name=reverse_text", "env.difficulty=1", "rl.group_size=4",
                      "rl.max_tokens=64", "run.seed=3", "model.path=" + dir_.string()});
    config_ = std::make_unique<Config>(Config::resolve({}, overrides));
    prompting_ = std::make_unique<model::Prompting>(
        model::Prompting::load(dir_, model::HfConfig::load(dir_)));
    environment_ = env::make_environment(*config_);
    tasks_ = std::make_unique<rl::TaskSource>(*environment_, *config_,
                                              rl::RlLoopConfig::from_config(*config_).seed);
    rules_ = std::make_unique<Rules>(Rules::from_config(*config_, 0));
    rows_ = honest_rows(node_.address(), 5, 2, 2);
  }

  // What an honest worker uploads for (node, step, submission): `groups` groups of G completions,
  // each the task's reference solution (a correct answer) or, for odd j, a wrong one.
  std::vector<rollout::RolloutRecord> honest_rows(const std::string& node, int32_t step,
                                                  int32_t submission, int64_t groups) {
    const int64_t g = rules_->rollout.group_size;
    const auto indices =
        rollout::sample_prompt_indices(node, step, submission, groups, rules_->dataset_size);
    const uint64_t seed = rollout::sampling_seed(node, step, submission);
    const auto stop = stop_ids(*prompting_).front();
    std::vector<rollout::RolloutRecord> rows;
    for (int64_t i = 0; i < groups; ++i) {
      const auto task = tasks_->at(indices[i], "test");
      const uint64_t base = seed + static_cast<uint64_t>(i * g);
      const int64_t target = rules_->rollout.length.draw_target(base);
      const auto prompt = rl::encode_prompt(
          *prompting_,
          environment_->build_prompt(
              task, {.system_prompt = rules_->rollout.system_prompt, .length_target = target}));
      std::vector<double> rewards;
      for (int64_t j = 0; j < g; ++j) {
        rollout::RolloutRecord r;
        r.run_id = "run";
        r.node_address = node;
        r.step = step;
        r.submission = submission;
        r.task_id = task.task_id;
        r.group_index = static_cast<int32_t>(i);
        r.prompt_tokens = prompt;
        r.completion_tokens =
            prompting_->tok.encode(j % 2 ? std::string("<answer>no</answer>") : *task.solution);
        r.completion_tokens.push_back(stop);
        r.completion_logprobs.assign(r.completion_tokens.size(), -1.0f);
        r.token_versions.assign(r.completion_tokens.size(), step - 1);
        r.seed = static_cast<int64_t>(base + j);
        r.temperature = 1.0f;
        r.finish_reason = "eos";
        const std::string text = json_safe_text(prompting_->tok.decode(r.completion_tokens, true));
        r.task_reward = static_cast<float>(environment_->score(task, text).reward);
        r.reward = static_cast<float>(
            rl::training_reward(rules_->rollout, r.task_reward, target, "stop",
                                static_cast<int64_t>(r.completion_tokens.size())));
        r.length_penalty = r.task_reward - r.reward;
        r.target_length = static_cast<int32_t>(target);
        r.proof.assign(toploc::chunk_count(r.completion_tokens.size() - 1, 32) * 258, '\0');
        rewards.push_back(r.reward);
        rows.push_back(std::move(r));
      }
      const auto adv = rl::group_advantages(rewards, rules_->normalize_std);
      for (int64_t j = 0; j < g; ++j)
        rows[rows.size() - g + j].advantage = static_cast<float>(adv[j]);
    }
    return rows;
  }

  // The check that rejects the current rows ("" when none does).
  std::string check(const SeenDraws* seen = nullptr) {
    rollout::RolloutFile file;
    file.rows = rows_;
    const FileContext context{*rules_, *environment_, *tasks_, *prompting_};
    const auto f = check_file(file, context, /*policy_version=*/5, seen);
    return f ? f->check : "";
  }

  static inline fs::path dir_;
  Identity node_ = Identity::generate();
  std::unique_ptr<Config> config_;
  std::unique_ptr<model::Prompting> prompting_;
  std::unique_ptr<env::Environment> environment_;
  std::unique_ptr<rl::TaskSource> tasks_;
  std::unique_ptr<Rules> rules_;
  std::vector<rollout::RolloutRecord> rows_;
};

TEST_F(FileChecks, AnHonestFilePassesAndItsGroupsHaveSignal) {
  EXPECT_EQ(check(), "");
  EXPECT_EQ(rows_[0].task_reward, 1.0f);  // the reference solution is right
  EXPECT_NE(rows_[0].advantage, 0.0f);
}

TEST_F(FileChecks, PromptsOfAnotherDrawAreCaughtByFixedDataSampling) {
  rows_ = honest_rows(node_.address(), 5, 7, 2);  // submission 7's prompts ...
  for (auto& r : rows_) r.submission = 2;         // ... uploaded as submission 2
  EXPECT_EQ(check(), "data sampling");
}

TEST_F(FileChecks, AnotherNodesPromptsAreCaughtByFixedDataSampling) {
  rows_ = honest_rows(Identity::generate().address(), 5, 2, 2);
  for (auto& r : rows_) r.node_address = node_.address();
  EXPECT_EQ(check(), "data sampling");
}

TEST_F(FileChecks, ARepeatedGroupIsCaughtByFixedDataSampling) {
  for (size_t i = 4; i < 8; ++i) {
    rows_[i] = rows_[i - 4];
    rows_[i].group_index = 1;
  }
  EXPECT_EQ(check(), "data sampling");
}

TEST_F(FileChecks, EditedPromptTokensAndSeedsAreCaughtByFixedDataSampling) {
  for (size_t i = 0; i < 4; ++i) rows_[i].prompt_tokens.back() ^= 1;
  EXPECT_EQ(check(), "data sampling");
  make({});
  std::swap(rows_[0].seed, rows_[4].seed);
  EXPECT_EQ(check(), "data sampling");
}

TEST_F(FileChecks, AGroupDrawnTwiceAcrossFilesIsCaughtWithPartialRollouts) {
  make({"infer.partial_rollouts=true"});
  for (auto& r : rows_) {  // C3PO++ names each group's draw in the task id
    r.task_id = rollout::drawn_task_id(r.task_id, {5, 2, r.group_index});
  }
  SeenDraws seen;
  EXPECT_EQ(check(&seen), "");
  rollout::RolloutFile file;
  file.rows = rows_;
  remember_draws(file, true, seen);
  EXPECT_EQ(check(&seen), "");             // the same file again (an upload retried) is no repeat
  for (auto& r : rows_) r.submission = 3;  // the same groups in the next file
  EXPECT_EQ(check(&seen), "data sampling");
}

TEST_F(FileChecks, SchemaRulesOfTheRun) {
  rows_.pop_back();  // a group of 3 where G = 4
  EXPECT_EQ(check(), "schema");
  make({});
  rows_[1].proof.resize(rows_[1].proof.size() + 258);  // one chunk proof too many
  EXPECT_EQ(check(), "schema");
  make({});
  for (auto& r : rows_) r.temperature = 0.7f;
  EXPECT_EQ(check(), "schema");
  make({});
  rows_[2].completion_tokens.push_back(prompting_->tok.vocab_size());
  EXPECT_EQ(check(), "schema");
}

TEST_F(FileChecks, EndingsMustBeWhereTheEngineStops) {
  auto& r = rows_[0];
  r.completion_tokens.insert(r.completion_tokens.begin() + 1, r.completion_tokens.back());
  EXPECT_EQ(check(), "termination");  // a stop token before the end
  make({});
  rows_[0].completion_tokens.pop_back();
  rows_[0].finish_reason = "length";  // cut short of rl.max_tokens
  EXPECT_EQ(check(), "termination");
  make({});
  rows_[0].completion_tokens.back() = 'x';  // "eos" without a stop token
  EXPECT_EQ(check(), "termination");
}

TEST_F(FileChecks, InflatedRewardsAndAdvantagesAreCaught) {
  for (auto& r : rows_) r.advantage *= 3;
  EXPECT_EQ(check(), "bounds");
  make({});
  rows_[1].reward += 0.5f;  // no longer the task reward it claims
  EXPECT_EQ(check(), "bounds");
  make({});
  // A consistent lie: task reward, reward and advantages all agree, the verifier does not.
  for (size_t j = 0; j < 4; ++j) {
    rows_[j].task_reward = rows_[j].reward = j == 0 ? 0.0f : 1.0f;
    rows_[j].length_penalty = 0;
  }
  std::vector<double> rewards = {0, 1, 1, 1};
  const auto adv = rl::group_advantages(rewards, true);
  for (size_t j = 0; j < 4; ++j) rows_[j].advantage = static_cast<float>(adv[j]);
  EXPECT_EQ(check(), "reward");
}

TEST_F(FileChecks, VersionsMustRiseInsideTheAsyncWindow) {
  rows_[0].token_versions.back() = 6;  // newer than the published version 5
  EXPECT_EQ(check(), "bounds");
  make({});
  rows_[0].token_versions.front() = 4;  // 4 then 4... then back to step - 1 = 4: fine
  rows_[0].token_versions[1] = 2;       // older than step 5 - async_level 2
  EXPECT_EQ(check(), "bounds");
}

TEST_F(FileChecks, TheValidatorChecksBindingAndSignatureBeforeAnythingElse) {
  const ModelOf no_model = [](int64_t) -> model::Transformer& {
    throw Error("the model checks must not run on a file that fails the file checks");
  };
  Validator validator(*config_, *prompting_, no_model);
  const Expected expected{"run", node_.address(), 5, 2, 5};
  const std::string signed_file =
      rollout::encode_rollout_file(rows_, {}, rollout::sign_body_with(node_));
  // Another node's submission number: the rows do not belong to this submission.
  auto other = expected;
  other.submission = 3;
  auto report = validator.validate(signed_file, other);
  EXPECT_FALSE(report.accepted);
  EXPECT_EQ(report.reason.rfind("step binding:", 0), 0u) << report.reason;
  // Signed by another key.
  const Identity thief = Identity::generate();
  report = validator.validate(
      rollout::encode_rollout_file(rows_, {}, rollout::sign_body_with(thief)), expected);
  EXPECT_EQ(report.reason.rfind("signature:", 0), 0u) << report.reason;
  // Not a rollout file at all.
  report = validator.validate("PAR1 not really", expected);
  EXPECT_EQ(report.reason.rfind("schema:", 0), 0u) << report.reason;
  // A bad reward is found before any model is needed.
  rows_[0].reward = 0.25f;
  report = validator.validate(
      rollout::encode_rollout_file(rows_, {}, rollout::sign_body_with(node_)), expected);
  EXPECT_EQ(report.reason.rfind("bounds:", 0), 0u) << report.reason;
  EXPECT_EQ(report.checked, 0);
}

}  // namespace
}  // namespace trellis::validator
