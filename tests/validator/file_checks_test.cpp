// The whole-file checks of a validator (validator/file_checks.h) on a submission built the way an
// honest worker builds one (fixed data sampling, the run's prompt rendering, seeds, rewards from
// the verifier, group advantages), with the reference solutions as completions: it passes, and
// each single tampering is named by the check that catches it. Validator::validate adds the
// binding to (run, node, step, submission) and the node's signature.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/identity.h"
#include "common/json.h"
#include "env/registry.h"
#include "error_of.h"
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
using test::error_of;

// The first finding of check_file, whichever form it returns its findings in.
std::optional<Finding> first_of(const std::optional<Finding>& f) { return f; }
std::optional<Finding> first_of(const std::vector<Finding>& f) {
  if (f.empty()) return std::nullopt;
  return f.front();
}

// The environment of a run with a verifier that takes `seconds` per completion, or throws.
class SlowVerifier : public env::Environment {
 public:
  SlowVerifier(const env::Environment& inner, double seconds, bool throws = false)
      : inner_(inner), seconds_(seconds), throws_(throws) {}
  std::string name() const override { return inner_.name(); }
  std::string description() const override { return inner_.description(); }
  std::string system_prompt() const override { return inner_.system_prompt(); }
  env::Task generate(uint64_t seed, int difficulty) const override {
    return inner_.generate(seed, difficulty);
  }
  void validate(const env::Task& task, const std::string& where) const override {
    inner_.validate(task, where);
  }
  env::Score score(const env::Task& task, std::string_view completion) const override {
    ++calls;
    scored.insert(std::string(completion) + "|" + task.task_id);
    if (throws_) throw std::out_of_range("the verifier indexed past its input");
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds_));
    return inner_.score(task, completion);
  }
  mutable int calls = 0;
  mutable std::set<std::string> scored;

 private:
  const env::Environment& inner_;
  double seconds_;
  bool throws_;
};

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
  // `environment` replaces the run's (a verifier of the test's own).
  std::string check(const SeenDraws* seen = nullptr,
                    const env::Environment* environment = nullptr) {
    rollout::RolloutFile file;
    file.rows = rows_;
    const FileContext context{*rules_, environment ? *environment : *environment_, *tasks_,
                              *prompting_};
    const auto f = first_of(check_file(file, context, /*policy_version=*/5, seen));
    message_ = f ? f->message : "";
    return f ? f->check : "";
  }

  // The rows signed by the node, as uploaded.
  std::string signed_file() const {
    return rollout::encode_rollout_file(rows_, {}, rollout::sign_body_with(node_));
  }

  static inline fs::path dir_;
  Identity node_ = Identity::generate();
  std::unique_ptr<Config> config_;
  std::unique_ptr<model::Prompting> prompting_;
  std::unique_ptr<env::Environment> environment_;
  std::unique_ptr<rl::TaskSource> tasks_;
  std::unique_ptr<Rules> rules_;
  std::vector<rollout::RolloutRecord> rows_;
  std::string message_;  // of the last check()'s finding
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
  auto& r = rows_[0];  // one log-prob and one version per token, or the schema objects first
  r.completion_tokens.insert(r.completion_tokens.begin() + 1, r.completion_tokens.back());
  r.completion_logprobs.push_back(-1.0f);
  r.token_versions.push_back(r.token_versions.back());
  EXPECT_EQ(check(), "termination");  // a stop token before the end
  make({});
  rows_[0].completion_tokens.pop_back();
  rows_[0].completion_logprobs.pop_back();
  rows_[0].token_versions.pop_back();
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

// Hostile rows (a worker is untrusted): every field the checks use is range-checked before use,
// and each yields a reject naming the check and the row, never a crash.
TEST_F(FileChecks, AGroupIndexOutsideTheFileIsASchemaReject) {
  for (const int32_t index :
       {-1, -2, 2, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}) {
    make({});
    for (size_t i = 0; i < 4; ++i) rows_[i].group_index = index;
    EXPECT_EQ(check(), "schema") << index;
    EXPECT_NE(message_.find("group_index"), std::string::npos) << message_;
  }
}

TEST_F(FileChecks, HostileDrawCoordinatesInTheTaskIdAreRejected) {
  make({"infer.partial_rollouts=true"});
  const auto honest = rows_;
  for (const std::string draw :
       {"5:2:4611686018427387904", "5:2:9223372036854775807", "5:2:2147483648",
        "5:9223372036854775807:0", "99999999999:2:0", "5:2:1000000", "5:2:-1"}) {
    rows_ = honest;
    for (size_t i = 0; i < 4; ++i) rows_[i].task_id += "@" + draw;
    EXPECT_EQ(check(), "data sampling") << draw;
  }
}

TEST_F(FileChecks, ArrayLengthsMustAgree) {
  rows_[1].token_versions.pop_back();
  EXPECT_EQ(check(), "schema");
  EXPECT_NE(message_.find("row 1"), std::string::npos) << message_;
  make({});
  rows_[2].completion_logprobs.push_back(-1.0f);
  EXPECT_EQ(check(), "schema");
  make({});
  rows_[3].completion_logprobs.clear();
  EXPECT_EQ(check(), "schema");
}

TEST_F(FileChecks, TokenIdsOutsideTheVocabularyAreASchemaReject) {
  for (const int32_t id : {-1, std::numeric_limits<int32_t>::min(), prompting_->tok.vocab_size(),
                           std::numeric_limits<int32_t>::max()}) {
    make({});
    rows_[5].prompt_tokens[0] = id;
    EXPECT_EQ(check(), "schema") << id;
    make({});
    rows_[6].completion_tokens[0] = id;
    EXPECT_EQ(check(), "schema") << id;
  }
}

TEST_F(FileChecks, NonFiniteNumbersAreASchemaReject) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const float bad : {nan, inf, -inf}) {
    for (int field = 0; field < 6; ++field) {
      make({});
      auto& r = rows_[1];
      float* target[] = {&r.reward,    &r.task_reward, &r.length_penalty,
                         &r.advantage, &r.temperature, &r.completion_logprobs[0]};
      if (field == 5 && bad == -inf) continue;  // a log-prob may be -inf (sampling judges it)
      *target[field] = bad;
      EXPECT_EQ(check(), "schema") << "field " << field << " = " << bad;
      EXPECT_NE(message_.find("row 1"), std::string::npos) << message_;
    }
  }
}

TEST_F(FileChecks, AVerifierThatThrowsIsARewardReject) {
  const SlowVerifier throwing(*environment_, 0, /*throws=*/true);
  EXPECT_EQ(check(nullptr, &throwing), "reward");
  EXPECT_NE(message_.find("past its input"), std::string::npos) << message_;
}

TEST_F(FileChecks, TheTimeBudgetRejectsASlowFile) {
  make({"validator.max_file_seconds=0.2"});
  const SlowVerifier slow(*environment_, 0.1);  // 8 rows: 0.8 s of verifier
  EXPECT_EQ(check(nullptr, &slow), "time budget");
  EXPECT_LT(slow.calls, 8);
  make({"validator.max_file_seconds=600"});
  const SlowVerifier quick(*environment_, 0.001);
  EXPECT_EQ(check(nullptr, &quick), "");
}

TEST_F(FileChecks, RewardsAreRecheckedOnAnUnpredictableSampleUpToTheCap) {
  make({"validator.max_reward_checks=3"});
  std::set<std::set<std::string>> samples;
  for (int i = 0; i < 20; ++i) {
    const SlowVerifier counting(*environment_, 0);
    EXPECT_EQ(check(nullptr, &counting), "");
    EXPECT_EQ(counting.calls, 3);
    samples.insert(counting.scored);
  }
  EXPECT_GT(samples.size(), 1u) << "the same rows were re-checked every time";
  make({});  // a file within the cap has every row re-checked
  const SlowVerifier counting(*environment_, 0);
  EXPECT_EQ(check(nullptr, &counting), "");
  EXPECT_EQ(counting.calls, 8);
}

TEST_F(FileChecks, AFileOverTheRowCapIsRejected) {
  make({"validator.max_file_rows=4"});
  EXPECT_EQ(check(), "schema");
  EXPECT_NE(message_.find("validator.max_file_rows"), std::string::npos) << message_;
}

TEST_F(FileChecks, AModelCheckThatThrowsIsARejectNotACrash) {
  const ModelOf throwing = [](int64_t) -> model::Transformer& {
    throw std::out_of_range("vector::_M_range_check");
  };
  Validator validator(*config_, *prompting_, throwing);
  const Expected expected{"run", node_.address(), 5, 2, 5};
  Report report;
  ASSERT_NO_THROW(report = validator.validate(signed_file(), expected));
  EXPECT_FALSE(report.accepted);
  EXPECT_NE(report.reason.find("_M_range_check"), std::string::npos) << report.reason;
  EXPECT_NE(report.reason.find("row"), std::string::npos) << report.reason;
}

// The validator's own trouble (a policy it cannot fetch) is no verdict on the file.
TEST_F(FileChecks, APolicyTheValidatorCannotFetchLeavesTheFileUnjudged) {
  const ModelOf unavailable = [](int64_t v) -> model::Transformer& {
    throw CannotJudge(fmt::format("policy version {}: no relay answered", v));
  };
  Validator validator(*config_, *prompting_, unavailable);
  EXPECT_THROW(validator.validate(signed_file(), {"run", node_.address(), 5, 2, 5}), CannotJudge);
}

// An FP8 run's validator recomputes in FP8 and judges by [validator.fp8]; a bf16 run's by
// [validator] (calibration_test.cpp: what each catches).
TEST_F(FileChecks, AnFp8RunIsJudgedByItsOwnThresholds) {
  const ModelOf no_model = [](int64_t) -> model::Transformer& { throw Error("no model"); };
  const std::vector<std::string> thresholds = {
      "validator.toploc_file_mant_err_mean=1.1", "validator.fp8.toploc_file_mant_err_mean=2.5",
      "validator.sampling_tolerance=0.1",        "validator.fp8.sampling_tolerance=0.2",
      "validator.toploc_exp_mismatches=30",      "validator.fp8.toploc_exp_mismatches=40"};
  for (const char* mode : {"fp8", "fp8-rollout"}) {
    auto overrides = thresholds;
    overrides.push_back(std::string("rl.precision=") + mode);
    make(overrides);
    EXPECT_TRUE(rules_->fp8) << mode;
    EXPECT_EQ(rules_->toploc_file_mant_err_mean, 2.5) << mode;
    EXPECT_EQ(rules_->sampling_tolerance, 0.2) << mode;
    EXPECT_EQ(rules_->thresholds.exp_mismatches, 40u) << mode;
    EXPECT_NO_THROW(Validator(*config_, *prompting_, no_model)) << mode;
  }
  auto overrides = thresholds;
  overrides.push_back("rl.precision=bf16");
  make(overrides);
  EXPECT_FALSE(rules_->fp8);
  EXPECT_EQ(rules_->toploc_file_mant_err_mean, 1.1);
  EXPECT_EQ(rules_->sampling_tolerance, 0.1);
  EXPECT_EQ(rules_->thresholds.exp_mismatches, 30u);
  const std::string msg = error_of([&] { make({"validator.fp8.max_logprob_error=-1"}); });
  EXPECT_NE(msg.find("validator.fp8.max_logprob_error"), std::string::npos) << msg;
  const std::string ratio = error_of([&] { make({"validator.fp8.precision_ratio=1.5"}); });
  EXPECT_NE(ratio.find("validator.fp8.precision_ratio"), std::string::npos) << ratio;
}

TEST_F(FileChecks, TheValidatorRejectsHostileRowsWithTheirReason) {
  const ModelOf no_model = [](int64_t) -> model::Transformer& {
    throw Error("the model checks must not run on a file that fails the file checks");
  };
  const Expected expected{"run", node_.address(), 5, 2, 5};
  {
    Validator validator(*config_, *prompting_, no_model);
    const auto honest = rows_;
    for (const int32_t index : {-1, -2, std::numeric_limits<int32_t>::max()}) {
      rows_ = honest;
      for (size_t i = 4; i < 8; ++i) rows_[i].group_index = index;
      Report report;
      ASSERT_NO_THROW(report = validator.validate(signed_file(), expected)) << index;
      EXPECT_FALSE(report.accepted);
      EXPECT_EQ(report.reason.rfind("schema: row 4: group_index", 0), 0u) << report.reason;
    }
  }
  make({"validator.max_file_seconds=0.000001"});
  Validator hurried(*config_, *prompting_, no_model);
  const auto report = hurried.validate(signed_file(), expected);
  EXPECT_FALSE(report.accepted);
  EXPECT_NE(report.reason.find("time budget:"), std::string::npos) << report.reason;
}

}  // namespace
}  // namespace trellis::validator
