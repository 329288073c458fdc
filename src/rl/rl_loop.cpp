#include "rl/rl_loop.h"

#include <cmath>
#include <cstdio>
#include <deque>

#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/rng.h"
#include "engine/engine.h"
#include "env/registry.h"
#include "model/checkpoint.h"
#include "model/flops.h"
#include "model/prompting.h"
#include "rl/advantages.h"
#include "rl/checkpoints.h"
#include "rl/metrics_log.h"
#include "rl/precision.h"
#include "rl/rollouts.h"
#include "rl/sample_stats.h"
#include "rl/task_source.h"
#include "rl/trainer.h"
#include "rl/trainer_ranks.h"

namespace trellis::rl {
namespace fs = std::filesystem;
namespace {

// A seed for (step, round) of a run: a Philox draw, so nearby steps get unrelated samples.
uint64_t derived_seed(uint64_t seed, int64_t step, int64_t round, uint32_t purpose) {
  const auto r = philox4x32({static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32),
                             static_cast<uint32_t>(round), purpose},
                            {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}
constexpr uint32_t kRolloutSeeds = 0x501, kTaskSeeds = 0x7a5;

// The rollouts for one trainer step and what their generation measured.
struct Batch {
  int64_t step = 0;
  std::vector<Rollout> rollouts;
  Metrics metrics;
};

Json batch_json(const Batch& b) {
  Json rollouts = Json::array(), metrics = Json::array();
  for (const auto& r : b.rollouts) rollouts.push_back(rollout_json(r));
  for (const auto& [name, value] : b.metrics.items()) metrics.push_back({name, value});
  return {{"step", b.step}, {"rollouts", rollouts}, {"metrics", metrics}};
}

Batch batch_from_json(const Json& j) {
  Batch b;
  b.step = j.at("step").get<int64_t>();
  for (const auto& r : j.at("rollouts")) b.rollouts.push_back(rollout_from_json(r));
  for (const auto& m : j.at("metrics"))
    b.metrics.set(m.at(0).get<std::string>(), m.at(1).get<double>());
  return b;
}

class RlLoop {
 public:
  RlLoop(const Config& config, const fs::path& run_dir, bool resume, const model::Compute& compute,
         ProcessGroup& group)
      : run_dir_(run_dir), cfg_(RlLoopConfig::from_config(config)) {
    const TrainerConfig trainer_config = TrainerConfig::from_config(config);  // before any loading
    precision_ = Precision::from_config(config);
    environment_ = env::make_environment(config);
    tasks_ = std::make_unique<TaskSource>(*environment_, config,
                                          derived_seed(cfg_.seed, 0, 0, kTaskSeeds));
    rollout_ = rollout_options(cfg_, config);

    base_model_ = config.get<std::string>("model.path");
    if (base_model_.empty())
      fail("model.path", "no model: set [model] path (a Hugging Face directory)");
    fs::path weights = base_model_;
    std::optional<fs::path> checkpoint;
    if (resume) {
      checkpoint = latest_checkpoint(run_dir / "checkpoints");
      if (!checkpoint)
        fail((run_dir / "checkpoints").string(), "--resume: no checkpoint to resume from");
      weights = *checkpoint;
    }
    model_ = model::load_transformer(weights, compute);
    prompting_ =
        std::make_unique<model::Prompting>(model::Prompting::load(base_model_, model_->config()));
    trainer_ = make_trainer(trainer_config, prompting_->tok.vocab_size(), *model_, base_model_,
                            compute, model::measure_matmul_flops(compute), &group);
    ranks_ = std::make_unique<RankLeader>(group, *trainer_);

    if (checkpoint) {
      const Json progress = ranks_->resume(*checkpoint);
      start_step_ = progress.at("step").get<int64_t>();
      tasks_->set_cursor(progress.at("task_cursor").get<int64_t>());
      for (const auto& b : progress.at("pending")) pending_.push_back(batch_from_json(b));
      log::info("resuming at step {} from {}", start_step_, checkpoint->string());
    }

    engine::EngineOptions eo;
    eo.max_num_seqs = cfg_.batch_size;
    eo.vocab_limit = prompting_->tok.vocab_size();
    eo.kv_cache_mib = 1024;
    eo.fp8 = precision_.rollout_fp8;
    engine_ = std::make_unique<engine::Engine>(*model_, eo);
    engine_->update_weights([](model::Transformer&) {}, start_step_);

    log::info("rl: {} on {} in {} ({}), {} steps of {} samples ({} per prompt), async level {}",
              weights.string(), compute.describe(), precision_.name(), tasks_->describe(),
              cfg_.steps, cfg_.batch_size, cfg_.group_size, cfg_.async_level);
    if (group.world() > 1) log::info("trainer: {} ranks", group.world());
    log::info("run directory: {}", run_dir.string());
  }

  void run() {
    MetricsLog log(run_dir_ / "metrics.jsonl", start_step_);
    int64_t next_gen = start_step_ + static_cast<int64_t>(pending_.size());
    // Batches for the first k steps come from the initial policy.
    while (next_gen < std::min(start_step_ + cfg_.async_level, cfg_.steps)) {
      pending_.push_back(generate(next_gen++));
    }
    for (int64_t s = start_step_; s < cfg_.steps; ++s) {
      const double t0 = monotonic_seconds();
      if (next_gen < cfg_.steps && next_gen <= s + cfg_.async_level) {
        pending_.push_back(generate(next_gen++));  // sampled by the policy of step s
      }
      // What training waited for in this iteration: generation (one process does both).
      const double waited = monotonic_seconds() - t0;
      Batch batch = std::move(pending_.front());
      pending_.pop_front();
      Metrics m = batch.metrics;
      m.set("time/wait_for_data", waited);
      write_staleness(batch.rollouts, s, m);
      if (batch.rollouts.empty()) {
        log::warn("step {}: no group had signal after {} rounds; no update", s, cfg_.max_rounds);
      } else {
        m.append(ranks_->step(batch.rollouts));
      }
      write_total_clip(m);
      engine_->update_weights([](model::Transformer&) {}, s + 1);
      m.set("time/step", monotonic_seconds() - t0);
      log.write(s, m);
      recent_rewards_.add(m);
      std::printf("%s\n", console_line(s, cfg_.steps, m, rl_console_fields()).c_str());
      std::fflush(stdout);
      if (s + 1 == cfg_.steps ||
          (cfg_.checkpoint_every > 0 && (s + 1) % cfg_.checkpoint_every == 0)) {
        checkpoint(s + 1);
      }
    }
    ranks_->stop();
  }

 private:
  Batch generate(int64_t step) {
    Batch b;
    b.step = step;
    const double t0 = monotonic_seconds();
    const int64_t groups_needed = cfg_.batch_size / cfg_.group_size;
    SampleStats stats;
    int64_t zero_adv = 0, kept_groups = 0;
    for (int64_t round = 0; round < cfg_.max_rounds && kept_groups < groups_needed; ++round) {
      RolloutOptions o = rollout_;
      if (cfg_.behaviour_temperature > 0) o.sampling.temperature = cfg_.behaviour_temperature;
      o.seed = derived_seed(cfg_.seed, step, round, kRolloutSeeds);
      const auto tasks = tasks_->take(groups_needed - kept_groups);
      auto groups = generate_rollouts(*engine_, *prompting_, *environment_, tasks, o);
      for (auto& g : groups) {
        std::vector<double> rewards;
        for (auto& r : g.rollouts) {
          // With rl.behaviour_temperature the trainer still scores at rl.temperature: the
          // behaviour log-probs come from another distribution, a real train/inference mismatch.
          r.sequence.temperature = cfg_.temperature;
          rewards.push_back(r.reward);
          stats.add(r);
        }
        const auto adv = group_advantages(rewards, cfg_.normalize_std);
        if (!has_signal(adv)) {
          ++zero_adv;
          continue;
        }
        ++kept_groups;
        for (size_t i = 0; i < g.rollouts.size(); ++i) {
          g.rollouts[i].advantage = adv[i];
          b.rollouts.push_back(std::move(g.rollouts[i]));
        }
      }
    }
    const double seconds = monotonic_seconds() - t0;
    stats.write(b.metrics);
    b.metrics.set("filter/zero_adv_groups", static_cast<double>(zero_adv));
    b.metrics.set("samples", static_cast<double>(b.rollouts.size()));
    b.metrics.set("throughput/rollout_tok_s", static_cast<double>(stats.tokens()) / seconds);
    return b;
  }

  void checkpoint(int64_t next_step) {
    Json pending = Json::array();
    for (const auto& b : pending_) pending.push_back(batch_json(b));
    Json progress{{"task_cursor", tasks_->cursor()}, {"pending", pending}};
    const fs::path dir = ranks_->checkpoint([&] {
      return save_checkpoint(run_dir_ / "checkpoints", next_step, *model_, trainer_->optimizer(),
                             base_model_, progress);
    });
    prune_checkpoints(run_dir_ / "checkpoints", cfg_.keep_checkpoints);
    log::info("checkpoint {}", dir.string());
  }

  fs::path run_dir_;
  RlLoopConfig cfg_;
  Precision precision_;
  std::unique_ptr<env::Environment> environment_;
  std::unique_ptr<TaskSource> tasks_;
  RolloutOptions rollout_;  // without the seed, which each round derives
  fs::path base_model_;
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<model::Prompting> prompting_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<RankLeader> ranks_;
  std::unique_ptr<engine::Engine> engine_;
  std::deque<Batch> pending_;
  RecentReward recent_rewards_;
  int64_t start_step_ = 0;
};

}  // namespace

RlLoopConfig RlLoopConfig::from_config(const Config& c) {
  RlLoopConfig r;
  r.steps = c.get_at_least<int64_t>("rl.steps", 1);
  r.group_size = c.get_at_least<int64_t>("rl.group_size", 1);
  r.batch_size = c.get<int64_t>("rl.batch_size");
  if (r.batch_size < r.group_size || r.batch_size % r.group_size != 0) {
    fail("rl.batch_size", "must be a positive multiple of rl.group_size ({}), got {}", r.group_size,
         r.batch_size);
  }
  r.async_level = c.get_at_least<int64_t>("rl.async_level", 0);
  r.max_tokens = c.get_at_least<int64_t>("rl.max_tokens", 1);
  r.temperature = c.get<double>("rl.temperature");
  if (!(r.temperature > 0)) {
    fail("rl.temperature", "must be > 0 (RL samples), got {}", r.temperature);
  }
  r.normalize_std = c.get<bool>("rl.normalize_std");
  r.zero_truncated = c.get<bool>("rl.zero_truncated");
  r.max_rounds = c.get_at_least<int64_t>("rl.max_rounds", 1);
  r.behaviour_temperature = c.get_at_least<double>("rl.behaviour_temperature", 0.0);
  r.checkpoint_every = c.get_at_least<int64_t>("trainer.checkpoint_every", 0);
  r.keep_checkpoints = c.get_at_least<int64_t>("trainer.keep_checkpoints", 0);
  r.seed = static_cast<uint64_t>(c.get<int64_t>("run.seed"));
  return r;
}

RolloutOptions rollout_options(const RlLoopConfig& rl, const Config& config) {
  RolloutOptions o;
  o.group_size = rl.group_size;
  o.max_tokens = rl.max_tokens;
  o.sampling.temperature = rl.temperature;
  o.system_prompt = config.get<std::string>("env.system_prompt");
  o.length = env::LengthReward::from_config(config);
  o.zero_truncated = rl.zero_truncated;
  return o;
}

void run_rl(const Config& config, const fs::path& run_dir, bool resume,
            const model::Compute& compute, ProcessGroup& group) {
  RlLoop loop(config, run_dir, resume, compute, group);
  loop.run();
}

}  // namespace trellis::rl
