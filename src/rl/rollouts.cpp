#include "rl/rollouts.h"

#include <algorithm>

#include "common/json.h"
#include "common/logging.h"
#include "rl/rollout_collector.h"

namespace trellis::rl {

int64_t RolloutGroup::passed() const {
  int64_t c = 0;
  for (const auto& r : rollouts) c += r.task_reward >= 1.0;
  return c;
}

std::vector<int32_t> encode_prompt(const model::Prompting& p,
                                   const std::vector<env::Message>& messages) {
  if (p.chat) {
    std::vector<model::ChatMessage> chat;
    for (const auto& m : messages) chat.push_back({m.role, m.content});
    return p.encode_chat(chat);
  }
  std::string text;
  for (const auto& m : messages) text += (text.empty() ? "" : "\n\n") + m.content;
  return p.encode(text + "\n\n");
}

double training_reward(const RolloutOptions& options, double task_reward, int64_t length_target,
                       const std::string& finish, int64_t tokens) {
  if (options.zero_truncated && finish == "length") return 0.0;
  return options.length.apply(task_reward, length_target, tokens);
}

void feed_proofs(engine::Engine& engine, toploc::ProofBuilder& proofs) {
  engine.set_hidden_sink([&proofs](engine::HiddenRow r) {
    proofs.add(toploc::completion_key(r.request_id, r.index), r.token_index, r.row);
  });
}

std::vector<RolloutGroup> generate_rollouts(engine::Engine& engine,
                                            const model::Prompting& prompting,
                                            const env::Environment& environment,
                                            const std::vector<env::Task>& tasks,
                                            const RolloutOptions& options) {
  if (!prompting.chat) {
    log::warn("the model has no chat template ({}); prompts are plain text", prompting.chat_error);
  }
  RolloutCollector collector(engine, prompting, environment, options);
  const int64_t g = options.group_size;
  for (size_t t = 0; t < tasks.size(); ++t) {
    collector.add(tasks[t], static_cast<int64_t>(t), options.seed + t * g);
  }
  const int64_t total = static_cast<int64_t>(tasks.size()) * g;
  const auto before = engine.stats();  // the engine may have served earlier calls
  while (engine.has_work()) {
    engine.step();
    if (options.on_progress) {
      const auto stats = engine.stats();
      options.on_progress(
          stats.completions_finished - before.completions_finished - collector.scoring(), total,
          stats.tokens_generated - before.tokens_generated);
    }
  }
  auto groups = collector.take(/*wait=*/true);
  std::sort(groups.begin(), groups.end(),
            [](const auto& a, const auto& b) { return a.task_index < b.task_index; });
  if (options.on_progress) {
    options.on_progress(total, total, engine.stats().tokens_generated - before.tokens_generated);
  }
  return groups;
}

Json rollout_json(const Rollout& r) {
  return {{"prompt", r.sequence.prompt},
          {"completion", r.sequence.completion},
          {"temperature", r.sequence.temperature},
          {"logprobs", r.logprobs},
          {"versions", r.versions},
          {"seed", r.seed},
          {"finish", r.finish},
          {"task_reward", r.task_reward},
          {"reward", r.reward},
          {"advantage", r.advantage}};
}

Rollout rollout_from_json(const Json& j) {
  Rollout r;
  r.sequence.prompt = j.at("prompt").get<std::vector<int32_t>>();
  r.sequence.completion = j.at("completion").get<std::vector<int32_t>>();
  r.sequence.temperature = j.at("temperature").get<double>();
  r.logprobs = j.at("logprobs").get<std::vector<float>>();
  r.versions = j.at("versions").get<std::vector<int64_t>>();
  r.seed = j.at("seed").get<uint64_t>();
  r.finish = j.at("finish").get<std::string>();
  r.task_reward = j.at("task_reward").get<double>();
  r.reward = j.at("reward").get<double>();
  r.advantage = j.at("advantage").get<double>();
  return r;
}

}  // namespace trellis::rl
