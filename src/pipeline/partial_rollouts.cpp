#include "pipeline/partial_rollouts.h"

#include <algorithm>

#include "common/error.h"
#include "rl/precision.h"

namespace trellis::pipeline {

PartialRolloutOptions PartialRolloutOptions::from_config(const Config& config) {
  PartialRolloutOptions o;
  const int64_t group_size = config.get_at_least<int64_t>("rl.group_size", 1);
  o.inflight = config.get<int64_t>("infer.inflight_completions");
  if (o.inflight == 0)
    o.inflight = config.get_at_least<int64_t>("infer.groups_per_submission", 1) * group_size;
  o.token_budget = config.get<int64_t>("infer.token_budget");
  o.max_retention = config.get_at_least<int64_t>("infer.max_retention", 0);
  if (o.max_retention == 0) o.max_retention = config.get<int64_t>("rl.async_level") + 1;
  return o;
}

engine::EngineOptions worker_engine_options(const Config& config, bool partial,
                                            int64_t vocab_limit) {
  engine::EngineOptions eo;
  if (partial) {
    const auto p = PartialRolloutOptions::from_config(config);
    eo.max_num_seqs = p.inflight;
    eo.max_retention = p.max_retention;
  } else {
    eo.max_num_seqs = config.get_at_least<int64_t>("infer.groups_per_submission", 1) *
                      config.get_at_least<int64_t>("rl.group_size", 1);
  }
  eo.vocab_limit = vocab_limit;
  eo.kv_cache_mib = 1024;
  eo.fp8 = rl::Precision::from_config(config).rollout_fp8;
  eo.decode_graphs = config.get<bool>("infer.decode_graphs");
  return eo;
}

int64_t DrawnGroup::oldest_version() const {
  int64_t oldest = INT64_MAX;
  for (const auto& r : group.rollouts)
    for (int64_t v : r.versions) oldest = std::min(oldest, v);
  return oldest;
}

PartialRolloutPool::PartialRolloutPool(engine::Engine& engine, const model::Prompting& prompting,
                                       const env::Environment& environment,
                                       const FixedDataSampler& sampler, rl::RolloutOptions rollout,
                                       PartialRolloutOptions options)
    : engine_(engine),
      sampler_(sampler),
      group_size_(rollout.group_size),
      options_(options),
      collector_(engine, prompting, environment, std::move(rollout)) {
  if (options_.inflight < group_size_) {
    fail("infer.inflight_completions",
         "{} holds not even one group of rl.group_size = {} completions", options_.inflight,
         group_size_);
  }
  if (options_.token_budget < 1)
    fail("infer.token_budget", "must be at least 1 (tokens per C3PO++ iteration)");
  if (engine_.options().max_num_seqs < options_.inflight) {
    fail("infer.inflight_completions", "{} exceeds the engine's max_num_seqs ({})",
         options_.inflight, engine_.options().max_num_seqs);
  }
}

std::vector<DrawnGroup> PartialRolloutPool::iterate(int64_t step, int64_t min_version,
                                                    IterationStats* stats) {
  IterationStats s;
  for (int64_t id : collector_.abort_older_than(min_version)) stale_.insert(id);
  const int64_t room = (options_.inflight - collector_.in_flight()) / group_size_;
  if (room > 0) {
    const int64_t draw = draws_[step]++;
    auto tasks = sampler_.draw(step, draw, room);
    const uint64_t seed = sampler_.seed(step, draw);
    for (int64_t i = 0; i < room; ++i) {
      collector_.add(tasks[i], next_id_, seed + static_cast<uint64_t>(i * group_size_));
      pending_.emplace(next_id_++, Pending{std::move(tasks[i]), {step, draw, i}});
    }
  }
  engine_.run(options_.token_budget);
  std::vector<DrawnGroup> out;
  for (auto& g : collector_.take()) {
    auto it = pending_.find(g.task_index);
    Pending p = std::move(it->second);
    pending_.erase(it);
    const bool whole = std::all_of(g.rollouts.begin(), g.rollouts.end(), [](const auto& r) {
      return r.finish == "stop" || r.finish == "length";
    });
    if (!whole) {
      ++(stale_.erase(g.task_index) ? s.stale_groups : s.purged_groups);
      continue;
    }
    out.push_back({std::move(g), std::move(p.task), p.draw});
  }
  if (stats) *stats = s;
  return out;
}

}  // namespace trellis::pipeline
