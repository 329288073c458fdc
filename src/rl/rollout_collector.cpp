#include "rl/rollout_collector.h"

#include <algorithm>

#include "common/error.h"
#include "common/json.h"

namespace trellis::rl {

struct RolloutCollector::Group {
  env::Task task;
  RolloutGroup result;
  int64_t running = 0;                 // completions the engine has not finished
  int64_t oldest_version = INT64_MAX;  // of the tokens sampled so far
  int64_t scored = 0;                  // completions ended and scored (under mu_)
};

RolloutCollector::RolloutCollector(engine::Engine& engine, const model::Prompting& prompting,
                                   const env::Environment& environment, RolloutOptions options)
    : engine_(engine),
      prompting_(prompting),
      environment_(environment),
      options_(std::move(options)),
      stop_ids_(prompting.chat ? prompting.chat_stop_ids() : prompting.stop_ids),
      // Greedy decoding scores tokens under the untempered softmax (sampler.h).
      temperature_(options_.sampling.temperature > 0 ? options_.sampling.temperature : 1.0) {}

RolloutCollector::~RolloutCollector() {
  for (const auto& [id, group] : groups_) engine_.abort(std::to_string(id));
  scorers_.wait();
}

void RolloutCollector::add(const env::Task& task, int64_t id, uint64_t seed) {
  abort_broken();
  if (groups_.count(id)) throw Error(fmt::format("rollout group {} is already in flight", id));
  auto group = std::make_unique<Group>();
  group->task = task;
  group->result.task_index = id;
  group->result.rollouts.resize(options_.group_size);
  group->result.length_target = options_.length.draw_target(seed);
  const auto messages = environment_.build_prompt(
      task,
      {.system_prompt = options_.system_prompt, .length_target = group->result.length_target});
  engine::Request r;
  r.id = std::to_string(id);
  r.prompt = encode_prompt(prompting_, messages);
  r.n = options_.group_size;
  r.max_tokens = options_.max_tokens;
  r.stop_ids = stop_ids_;
  r.sampling = options_.sampling;
  r.seed = seed;
  r.hidden_states = options_.proofs != nullptr;
  Group& g = *group;
  g.running = options_.group_size;
  groups_.emplace(id, std::move(group));
  const auto on_token = [&g](const engine::TokenEvent& e) {
    g.oldest_version = std::min(g.oldest_version, e.completion.versions.back());
  };
  engine_.add(std::move(r), {.on_token = on_token, .on_finish = [this, &g](engine::Completion c) {
                               on_finish(g, std::move(c));
                             }});
}

void RolloutCollector::on_finish(Group& group, engine::Completion c) {
  --group.running;
  if (options_.proofs) {  // its last chunk can be proven as soon as its last row is in
    options_.proofs->finish(toploc::completion_key(c.request_id, c.index),
                            static_cast<int64_t>(c.tokens.size()) - 1);
  }
  Rollout& ro = group.result.rollouts[c.index];
  ro.sequence.prompt = std::move(c.prompt);
  ro.sequence.completion = std::move(c.tokens);
  ro.sequence.temperature = temperature_;
  ro.logprobs = std::move(c.logprobs);
  ro.versions = std::move(c.versions);
  ro.seed = c.seed;
  ro.finish = engine::finish_name(c.finish);
  ro.text = json_safe_text(prompting_.tok.decode(ro.sequence.completion, /*skip_special=*/true));
  const auto count_scored = [this, &group] {
    std::lock_guard lock(mu_);
    if (++group.scored == options_.group_size) complete_.push_back(group.result.task_index);
  };
  if (c.finish == engine::Finish::kPurged || c.finish == engine::Finish::kAbort) {
    // Not an answer: never scored, reward 0. Its siblings are aborted so that the group ends.
    ro.reason = ro.finish;
    {
      std::lock_guard lock(mu_);
      broken_.push_back(group.result.task_index);
    }
    count_scored();
    return;
  }
  // The scorer writes only this rollout's reward fields.
  scorers_.submit([this, &group, &ro, count_scored] {
    const auto score = environment_.score(group.task, ro.text);
    ro.task_reward = score.reward;
    ro.reason = score.reason;
    ro.reward =
        training_reward(options_, score.reward, group.result.length_target, ro.finish, ro.tokens());
    count_scored();
  });
}

void RolloutCollector::abort_broken() {
  std::vector<int64_t> broken;
  {
    std::lock_guard lock(mu_);
    broken.swap(broken_);
  }
  for (int64_t id : broken) engine_.abort(std::to_string(id));
}

std::vector<int64_t> RolloutCollector::abort_older_than(int64_t version) {
  std::vector<int64_t> ids;
  for (const auto& [id, group] : groups_)
    if (group->running > 0 && group->oldest_version < version) ids.push_back(id);
  for (int64_t id : ids) engine_.abort(std::to_string(id));
  return ids;
}

int64_t RolloutCollector::in_flight() const {
  int64_t running = 0;
  for (const auto& [id, group] : groups_) running += group->running;
  return running;
}

std::vector<RolloutGroup> RolloutCollector::take(bool wait) {
  abort_broken();
  if (wait) scorers_.wait();
  std::vector<int64_t> complete;
  {
    std::lock_guard lock(mu_);
    complete.swap(complete_);
  }
  std::vector<RolloutGroup> out;
  for (int64_t id : complete) {
    auto it = groups_.find(id);
    RolloutGroup& group = it->second->result;
    if (options_.proofs) {
      // The rows are normally in already: they were queued before the completion finished.
      for (size_t i = 0; i < group.rollouts.size(); ++i) {
        Rollout& ro = group.rollouts[i];
        const std::string key = toploc::completion_key(std::to_string(id), static_cast<int64_t>(i));
        const int64_t rows = std::max<int64_t>(0, ro.tokens() - 1);
        if (ro.finish == "stop" || ro.finish == "length") {
          ro.proof = options_.proofs->take(key, rows);
          continue;
        }
        try {  // dropped with its group: only its rows must go
          options_.proofs->take(key, rows, 1.0);
        } catch (const Error&) {
          options_.proofs->forget(key);
        }
      }
    }
    out.push_back(std::move(group));
    groups_.erase(it);
  }
  return out;
}

}  // namespace trellis::rl
