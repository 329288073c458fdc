#include "pipeline/partial_rollouts.h"

#include <algorithm>

#include "common/error.h"

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

int64_t DrawnGroup::oldest_version() const {
  int64_t oldest = INT64_MAX;
  for (const auto& r : group.rollouts)
    for (int64_t v : r.versions) oldest = std::min(oldest, v);
  return oldest;
}

PartialRolloutPool::PartialRolloutPool(engine::Engine& engine, const model::Prompting& prompting,
                                       const env::Environment& environment,
                                       const rl::TaskSource& tasks, int64_t dataset_size,
                                       std::string node_address, rl::RolloutOptions rollout,
                                       PartialRolloutOptions options)
    : engine_(engine),
      tasks_(tasks),
      dataset_size_(dataset_size),
      address_(std::move(node_address)),
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
    const rollout::DrawCoordinates draw{step, draws_[step]++, 0};
    const auto indices =
        rollout::sample_prompt_indices(address_, draw.step, draw.submission, room, dataset_size_);
    const uint64_t seed = rollout::sampling_seed(address_, draw.step, draw.submission);
    for (int64_t i = 0; i < room; ++i) {
      Pending p{tasks_.at(indices[i], "fixed data sampling"), {draw.step, draw.submission, i}};
      collector_.add(p.task, next_id_, seed + static_cast<uint64_t>(i * group_size_));
      pending_.emplace(next_id_++, std::move(p));
    }
    s.added_groups = room;
  }
  s.finished_tokens = engine_.run(options_.token_budget).tokens;
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
  s.completed_groups = static_cast<int64_t>(out.size());
  if (stats) *stats = s;
  return out;
}

}  // namespace trellis::pipeline
