// C3PO++ partial rollouts (pipeline/partial_rollouts.h) on a tiny random model in fp32, where
// sampling is batch invariant: the pool's groups are exactly what generate_rollouts() makes for
// the same draw on its own, the pool never holds more than Ω unfinished completions, completions
// carry over a weight update with per-token versions, a retention of one version purges a started
// completion together with its group, and groups older than the async window are aborted.
#include "pipeline/partial_rollouts.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <set>

#include "common/config.h"
#include "env/registry.h"
#include "model/checkpoint.h"
#include "model/presets.h"

namespace trellis::pipeline {
namespace {

namespace fs = std::filesystem;

const std::string kAddress(64, 'c');
constexpr int64_t kDatasetSize = 1000;
constexpr int64_t kGroup = 4;

class PartialRollouts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("trellis_partial_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    model::init_model_dir(dir_, model::Arch::Qwen2, "tiny", 5);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override {
    model_ = model::load_transformer(dir_, {torch::kCPU, torch::kFloat32});
    prompting_ = std::make_unique<model::Prompting>(model::Prompting::load(dir_, model_->config()));
    tasks_ = std::make_unique<rl::TaskSource>(*environment_, config_, 11);
    sampler_ = std::make_unique<FixedDataSampler>(*tasks_, kAddress, config_);
  }

  std::unique_ptr<engine::Engine> make_engine(int64_t max_num_seqs, int64_t max_retention = 0) {
    engine::EngineOptions eo;
    eo.max_num_seqs = max_num_seqs;
    eo.max_retention = max_retention;
    eo.vocab_limit = prompting_->tok.vocab_size();
    eo.kv_cache_mib = 64;
    return std::make_unique<engine::Engine>(*model_, eo);
  }

  rl::RolloutOptions rollout_options(int64_t max_tokens, double temperature) const {
    rl::RolloutOptions o;
    o.group_size = kGroup;
    o.max_tokens = max_tokens;
    o.sampling.temperature = temperature;
    return o;
  }

  PartialRolloutPool make_pool(engine::Engine& engine, const rl::RolloutOptions& rollout,
                               int64_t inflight, int64_t token_budget) {
    return PartialRolloutPool(engine, *prompting_, *environment_, *sampler_, rollout,
                              {.inflight = inflight, .token_budget = token_budget});
  }

  // Another model's weights, so that a new version samples differently.
  void load_other_weights(engine::Engine& engine, int64_t version) {
    model::Transformer next(model_->config(), {torch::kCPU, torch::kFloat32});
    next.init_random(99);
    engine.update_weights(
        [&](model::Transformer& m) {
          torch::NoGradGuard no_grad;
          for (const auto& [name, p] : m.named_parameters()) p.copy_(next.parameter(name));
        },
        version);
  }

  static fs::path dir_;
  Config config_ = Config::resolve(
      {}, {"env.name=\"reverse_text\"", "infer.dataset_size=" + std::to_string(kDatasetSize)});
  std::unique_ptr<env::Environment> environment_ = env::make_environment("reverse_text");
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<model::Prompting> prompting_;
  std::unique_ptr<rl::TaskSource> tasks_;
  std::unique_ptr<FixedDataSampler> sampler_;
};
fs::path PartialRollouts::dir_;

TEST_F(PartialRollouts, GroupsAreTheirDrawsGeneratedAloneAndThePoolHoldsOmega) {
  const auto rollout = rollout_options(16, 1.0);
  auto engine = make_engine(8);
  auto pool = make_pool(*engine, rollout, 8, 8);
  std::vector<DrawnGroup> groups;
  for (int i = 0; i < 40 && groups.size() < 5; ++i) {
    IterationStats stats;
    for (auto& g : pool.iterate(3, 0, &stats)) groups.push_back(std::move(g));
    EXPECT_LE(pool.in_flight(), 8);
    EXPECT_EQ(stats.purged_groups, 0);
    EXPECT_LE(engine->stats().running, 8);
  }
  ASSERT_GE(groups.size(), 5u);
  std::set<std::pair<int64_t, int64_t>> draws;
  for (const auto& g : groups) {
    SCOPED_TRACE(rollout::drawn_task_id(g.task.task_id, g.draw));
    EXPECT_EQ(g.draw.step, 3);
    EXPECT_TRUE(draws.insert({g.draw.submission, g.draw.index}).second) << "a draw used twice";
    // The prompt is fixed data sampling's for the draw coordinates.
    const int64_t index = rollout::sample_prompt_indices(kAddress, 3, g.draw.submission,
                                                         g.draw.index + 1, kDatasetSize)
                              .back();
    EXPECT_EQ(g.task.task_id, tasks_->at(index, "test").task_id);
    // The same draw generated on its own, by the plain path, on a fresh engine.
    auto alone_options = rollout;
    alone_options.seed = rollout::sampling_seed(kAddress, 3, g.draw.submission) +
                         static_cast<uint64_t>(g.draw.index * kGroup);
    auto fresh = make_engine(8);
    const auto alone =
        rl::generate_rollouts(*fresh, *prompting_, *environment_, {g.task}, alone_options).at(0);
    ASSERT_EQ(g.group.rollouts.size(), static_cast<size_t>(kGroup));
    for (int64_t j = 0; j < kGroup; ++j) {
      const auto& r = g.group.rollouts[j];
      EXPECT_EQ(r.seed, alone_options.seed + j);
      EXPECT_EQ(r.sequence.prompt, alone.rollouts[j].sequence.prompt);
      EXPECT_EQ(r.sequence.completion, alone.rollouts[j].sequence.completion);
      EXPECT_EQ(r.finish, alone.rollouts[j].finish);
      EXPECT_EQ(r.reward, alone.rollouts[j].reward);
      EXPECT_EQ(r.versions, std::vector<int64_t>(r.sequence.completion.size(), 0));
    }
  }
}

// At temperature 20 sampling is close to uniform over the small vocabulary, so completions stop at
// scattered lengths and a budget of one token ends an iteration while others are mid-way.
TEST_F(PartialRollouts, UnfinishedCompletionsContinueUnderTheNextVersion) {
  const auto rollout = rollout_options(64, 20.0);
  auto engine = make_engine(8);
  auto pool = make_pool(*engine, rollout, 8, 1);
  std::vector<DrawnGroup> groups;
  for (auto& g : pool.iterate(0, 0)) groups.push_back(std::move(g));
  load_other_weights(*engine, 1);
  for (int i = 0; i < 200 && groups.size() < 6; ++i) {
    for (auto& g : pool.iterate(0, 0)) groups.push_back(std::move(g));
  }
  int64_t spanning = 0;
  for (const auto& g : groups) {
    for (const auto& r : g.group.rollouts) {
      ASSERT_EQ(r.versions.size(), r.sequence.completion.size());
      ASSERT_EQ(r.logprobs.size(), r.sequence.completion.size());
      EXPECT_TRUE(std::is_sorted(r.versions.begin(), r.versions.end()));
      spanning += !r.versions.empty() && r.versions.front() == 0 && r.versions.back() == 1;
    }
  }
  EXPECT_GT(spanning, 0) << "no completion carried over the weight update";
  EXPECT_EQ(groups.front().oldest_version(), 0);
}

TEST_F(PartialRollouts, RetentionPurgesAStartedCompletionWithItsGroup) {
  const auto rollout = rollout_options(64, 20.0);
  auto engine = make_engine(8, /*max_retention=*/1);
  auto pool = make_pool(*engine, rollout, 8, 1);
  std::vector<DrawnGroup> groups;
  for (auto& g : pool.iterate(0, 0)) groups.push_back(std::move(g));
  const int64_t before_update = static_cast<int64_t>(groups.size());
  load_other_weights(*engine, 1);
  int64_t purged = 0;
  for (int i = 0; i < 200 && groups.size() < static_cast<size_t>(before_update + 4); ++i) {
    IterationStats stats;
    for (auto& g : pool.iterate(1, 0, &stats)) groups.push_back(std::move(g));
    purged += stats.purged_groups;
  }
  EXPECT_GT(purged, 0) << "the completions in flight at the update were not purged";
  for (size_t i = before_update; i < groups.size(); ++i) {
    for (const auto& r : groups[i].group.rollouts) {
      // No completion spans two versions: purged ones never come back.
      EXPECT_EQ(std::set<int64_t>(r.versions.begin(), r.versions.end()).size(), 1u);
    }
  }
  EXPECT_LE(pool.in_flight(), 8);
}

// Once the async window has moved past a version, groups holding its tokens are aborted in flight
// instead of being carried on (they could never be accepted).
TEST_F(PartialRollouts, GroupsOlderThanTheWindowAreAbortedInFlight) {
  const auto rollout = rollout_options(64, 20.0);
  auto engine = make_engine(8);
  auto pool = make_pool(*engine, rollout, 8, 1);
  pool.iterate(0, 0);
  load_other_weights(*engine, 1);
  IterationStats stats;
  int64_t stale = 0;
  std::vector<DrawnGroup> groups;
  for (int i = 0; i < 200 && groups.size() < 4; ++i) {
    for (auto& g : pool.iterate(0, 1, &stats)) groups.push_back(std::move(g));
    stale += stats.stale_groups;
    EXPECT_EQ(stats.purged_groups, 0);
  }
  EXPECT_GT(stale, 0) << "groups with version-0 tokens were carried on";
  for (const auto& g : groups) EXPECT_GE(g.oldest_version(), 1);
}

TEST_F(PartialRollouts, AnOmegaBelowOneGroupIsRefusedNamingTheKey) {
  auto engine = make_engine(8);
  try {
    make_pool(*engine, rollout_options(16, 1.0), kGroup - 1, 8);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("infer.inflight_completions"), std::string::npos)
        << e.what();
  }
}

TEST(WorkerEngineOptions, FollowTheConfig) {
  const auto plain = worker_engine_options(Config::defaults(), false, 300);
  EXPECT_EQ(plain.max_num_seqs, 4 * Config::defaults().get<int64_t>("rl.group_size"));
  EXPECT_EQ(plain.vocab_limit, 300);
  EXPECT_TRUE(plain.decode_graphs);  // on a GPU; the engine ignores it elsewhere
  EXPECT_FALSE(plain.fp8);
  const auto eager = worker_engine_options(
      Config::resolve({}, {"infer.decode_graphs=false", "infer.groups_per_submission=2"}), false,
      300);
  EXPECT_FALSE(eager.decode_graphs);
  EXPECT_EQ(eager.max_num_seqs, 2 * Config::defaults().get<int64_t>("rl.group_size"));
}

}  // namespace
}  // namespace trellis::pipeline
