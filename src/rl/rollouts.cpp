#include "rl/rollouts.h"

#include "common/json.h"
#include "common/logging.h"
#include "common/worker_pool.h"

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

std::vector<RolloutGroup> generate_rollouts(engine::Engine& engine,
                                            const model::Prompting& prompting,
                                            const env::Environment& environment,
                                            const std::vector<env::Task>& tasks,
                                            const RolloutOptions& options) {
  if (!prompting.chat) {
    log::warn("the model has no chat template ({}); prompts are plain text", prompting.chat_error);
  }
  const auto stop_ids = prompting.chat ? prompting.chat_stop_ids() : prompting.stop_ids;
  const int64_t g = options.group_size;
  // Greedy decoding scores tokens under the untempered softmax (sampler.h).
  const double temperature = options.sampling.temperature > 0 ? options.sampling.temperature : 1.0;
  std::vector<RolloutGroup> groups(tasks.size());
  WorkerPool scorers(0);
  for (size_t t = 0; t < tasks.size(); ++t) {
    auto& group = groups[t];
    group.task_index = static_cast<int64_t>(t);
    group.rollouts.resize(g);
    const uint64_t seed = options.seed + t * g;
    group.length_target = options.length.draw_target(seed);
    const auto messages = environment.build_prompt(
        tasks[t], {.system_prompt = options.system_prompt, .length_target = group.length_target});
    engine::Request r;
    r.id = std::to_string(t);
    r.prompt = encode_prompt(prompting, messages);
    r.n = g;
    r.max_tokens = options.max_tokens;
    r.stop_ids = stop_ids;
    r.sampling = options.sampling;
    r.seed = seed;
    // on_finish runs on this thread inside engine.step(); the scorer writes only its own slot.
    engine.add(std::move(r), {.on_token = {}, .on_finish = [&, t](engine::Completion c) {
                                Rollout& ro = groups[t].rollouts[c.index];
                                ro.sequence.prompt = std::move(c.prompt);
                                ro.sequence.completion = std::move(c.tokens);
                                ro.sequence.temperature = temperature;
                                ro.logprobs = std::move(c.logprobs);
                                ro.versions = std::move(c.versions);
                                ro.seed = c.seed;
                                ro.finish = engine::finish_name(c.finish);
                                ro.text = json_safe_text(prompting.tok.decode(
                                    ro.sequence.completion, /*skip_special=*/true));
                                scorers.submit([&, t, &ro = ro] {
                                  const auto score = environment.score(tasks[t], ro.text);
                                  ro.task_reward = score.reward;
                                  ro.reason = score.reason;
                                  ro.reward = training_reward(options, score.reward,
                                                              groups[t].length_target, ro.finish,
                                                              ro.tokens());
                                });
                              }});
  }
  const int64_t total = static_cast<int64_t>(tasks.size()) * g;
  const auto before = engine.stats();  // the engine may have served earlier calls
  while (engine.has_work()) {
    engine.step();
    if (options.on_progress) {
      const auto stats = engine.stats();
      options.on_progress(
          stats.completions_finished - before.completions_finished - scorers.pending(), total,
          stats.tokens_generated - before.tokens_generated);
    }
  }
  scorers.wait();
  if (options.on_progress) {
    options.on_progress(total, total, engine.stats().tokens_generated - before.tokens_generated);
  }
  return groups;
}

}  // namespace trellis::rl
