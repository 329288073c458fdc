#include "validator/file_checks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/error.h"
#include "common/exception_message.h"
#include "common/json.h"
#include "rl/advantages.h"
#include "rollout/data_sampling.h"

namespace trellis::validator {
namespace {

template <typename... Args>
std::optional<Finding> finding(const char* check, fmt::format_string<Args...> f, Args&&... args) {
  return Finding{check, fmt::format(f, std::forward<Args>(args)...)};
}

// Where a group's prompt was drawn, and the dataset's task id. Only C3PO++ files may name another
// draw in the task_id (its coordinates bounded by parse_drawn_task_id); otherwise a group is place
// `group_index` of its own file's draw (all three range-checked by the schema).
std::pair<rollout::DrawCoordinates, std::string> draw_of(const rollout::RolloutRecord& row,
                                                         bool partial_rollouts) {
  if (partial_rollouts) {
    if (auto parsed = rollout::parse_drawn_task_id(row.task_id))
      return {parsed->second, parsed->first};
  }
  return {{row.step, row.submission, row.group_index}, row.task_id};
}

bool close(double got, double want, double tolerance) {
  return std::abs(got - want) <= tolerance * (1 + std::abs(want));
}

// Rows by group_index (ascending), each group's rows in file order.
std::map<int32_t, std::vector<size_t>> groups_of(const std::vector<rollout::RolloutRecord>& rows) {
  std::map<int32_t, std::vector<size_t>> groups;
  for (size_t i = 0; i < rows.size(); ++i) groups[rows[i].group_index].push_back(i);
  return groups;
}

// The token ids a file may hold: below the tokenizer's size and the model's.
int64_t vocab_limit(const FileContext& c) {
  int64_t vocab = c.prompting.tok.vocab_size();
  if (c.limits.vocab > 0) vocab = std::min(vocab, c.limits.vocab);
  return vocab;
}

// The row's place in the file and the run's sampling, after its fields are sane.
std::optional<Finding> check_row_schema(const rollout::RolloutRecord& r, size_t i,
                                        const FileContext& c, int64_t groups) {
  if (r.step < 0 || r.submission < 0)
    return finding("schema", "row {}: step {} and submission {} must not be negative", i, r.step,
                   r.submission);
  // An honest worker numbers its groups 0 .. groups-1 (a file of R rows holds R / G groups).
  if (r.group_index < 0 || r.group_index >= groups)
    return finding("schema", "row {}: group_index {} is outside [0, {}) ({} rows in groups of {})",
                   i, r.group_index, groups, groups * c.rules.rollout.group_size,
                   c.rules.rollout.group_size);
  if (auto f = check_row_fields(r, i, c.rules, vocab_limit(c), c.limits.context)) return f;
  const double t = c.rules.rollout.sampling.temperature;
  const float want = static_cast<float>(t > 0 ? t : 1.0);
  if (r.temperature != want) {
    return finding("schema", "row {}: temperature {} but the run samples at {}", i, r.temperature,
                   want);
  }
  return std::nullopt;
}

// The structural half of termination (the probability of EOS needs the model: sample_checks.h):
// the engine stops at the first stop id, so one may stand only last, and a completion that did
// not stop must have reached max_tokens.
std::optional<Finding> check_row_ending(const rollout::RolloutRecord& r, size_t i,
                                        const std::vector<int32_t>& stops, int64_t max_tokens) {
  const auto is_stop = [&](int32_t t) {
    return std::find(stops.begin(), stops.end(), t) != stops.end();
  };
  const auto n = r.completion_tokens.size();
  for (size_t j = 0; j + 1 < n; ++j) {
    if (is_stop(r.completion_tokens[j]))
      return finding("termination", "row {}: stop token {} at position {} of {}, before the end", i,
                     r.completion_tokens[j], j, n);
  }
  if (r.finish_reason == "eos" && !is_stop(r.completion_tokens.back()))
    return finding("termination",
                   "row {}: finish_reason eos but the last token {} is not a stop token", i,
                   r.completion_tokens.back());
  if (r.finish_reason == "length") {
    if (static_cast<int64_t>(n) != max_tokens)
      return finding("termination",
                     "row {}: finish_reason length after {} tokens, but rl.max_tokens is {} "
                     "(a truncated completion)",
                     i, n, max_tokens);
    if (is_stop(r.completion_tokens.back()))
      return finding("termination",
                     "row {}: finish_reason length but the last token is a stop token", i);
  }
  return std::nullopt;
}

std::optional<Finding> check_row_bounds(const rollout::RolloutRecord& r, size_t i,
                                        const Rules& rules, int64_t policy_version) {
  const int64_t oldest = std::max<int64_t>(0, r.step - rules.async_level);
  for (size_t j = 0; j < r.token_versions.size(); ++j) {
    const int32_t v = r.token_versions[j];
    if (v < oldest || v > policy_version)
      return finding("bounds", "row {}: token {} claims policy version {}, outside [{}, {}]", i, j,
                     v, oldest, policy_version);
    if (j > 0 && v < r.token_versions[j - 1])
      return finding("bounds", "row {}: token {} claims version {} after version {}", i, j, v,
                     r.token_versions[j - 1]);
  }
  if (!(r.task_reward >= 0 && r.task_reward <= 1))
    return finding("bounds", "row {}: task_reward {} is outside [0, 1]", i, r.task_reward);
  const std::string finish = r.finish_reason == "eos" ? "stop" : r.finish_reason;
  const auto n = static_cast<int64_t>(r.completion_tokens.size());
  const double want = rl::training_reward(rules.rollout, r.task_reward, r.target_length, finish, n);
  if (!close(r.reward, want, 1e-5)) {
    return finding("bounds",
                   "row {}: reward {} but task reward {} with length target {} after {} tokens "
                   "({}) gives {}",
                   i, r.reward, r.task_reward, r.target_length, n, r.finish_reason, want);
  }
  if (!close(r.length_penalty, static_cast<double>(r.task_reward) - r.reward, 1e-5))
    return finding("bounds", "row {}: length_penalty {} is not task_reward - reward ({})", i,
                   r.length_penalty, static_cast<double>(r.task_reward) - r.reward);
  return std::nullopt;
}

}  // namespace

std::vector<int32_t> stop_ids(const model::Prompting& prompting) {
  return prompting.chat ? prompting.chat_stop_ids() : prompting.stop_ids;
}

std::optional<Finding> check_row_fields(const rollout::RolloutRecord& r, size_t i,
                                        const Rules& rules, int64_t vocab, int64_t context) {
  const auto n = static_cast<int64_t>(r.completion_tokens.size());
  const auto p = static_cast<int64_t>(r.prompt_tokens.size());
  if (n == 0) return finding("schema", "row {}: the completion is empty", i);
  if (n > rules.rollout.max_tokens) {
    return finding("schema", "row {}: {} completion tokens, more than rl.max_tokens = {}", i, n,
                   rules.rollout.max_tokens);
  }
  if (p == 0) return finding("schema", "row {}: the prompt is empty", i);
  if (context > 0 && p + n > context)
    return finding("schema",
                   "row {}: a prompt of {} tokens and a completion of {} exceed the model's "
                   "context of {} positions",
                   i, p, n, context);
  if (static_cast<int64_t>(r.completion_logprobs.size()) != n)
    return finding("schema", "row {}: {} completion_logprobs for {} completion tokens", i,
                   r.completion_logprobs.size(), n);
  if (static_cast<int64_t>(r.token_versions.size()) != n)
    return finding("schema", "row {}: {} token_versions for {} completion tokens", i,
                   r.token_versions.size(), n);
  for (const auto* tokens : {&r.prompt_tokens, &r.completion_tokens}) {
    for (int32_t t : *tokens) {
      if (t < 0 || t >= vocab)
        return finding("schema", "row {}: {} token id {} is outside the vocabulary (0..{})", i,
                       tokens == &r.prompt_tokens ? "prompt" : "completion", t, vocab - 1);
    }
  }
  const std::pair<const char*, float> numbers[] = {{"temperature", r.temperature},
                                                   {"reward", r.reward},
                                                   {"task_reward", r.task_reward},
                                                   {"length_penalty", r.length_penalty},
                                                   {"advantage", r.advantage}};
  for (const auto& [name, value] : numbers) {
    if (!std::isfinite(value))
      return finding("schema", "row {}: {} is {}, not a finite number", i, name, value);
  }
  for (int64_t j = 0; j < n; ++j) {
    const float lp = r.completion_logprobs[j];  // -inf is a number the sampling check judges
    if (std::isnan(lp) || lp == std::numeric_limits<float>::infinity())
      return finding("schema", "row {}: completion_logprobs[{}] is {}, not a log-probability", i, j,
                     lp);
  }
  if (r.finish_reason != "eos" && r.finish_reason != "length")
    return finding("schema", "row {}: finish_reason '{}' is neither eos nor length", i,
                   r.finish_reason);
  const size_t chunks = toploc::chunk_count(static_cast<size_t>(n - 1), rules.proof.chunk_rows);
  const size_t proof_bytes = chunks * toploc::chunk_proof_bytes(rules.proof.k);
  if ((rules.proofs || !r.proof.empty()) && r.proof.size() != proof_bytes) {
    return finding("schema",
                   "row {}: the proof has {} bytes; {} completion tokens need {} ({} chunk proofs "
                   "of {} bytes)",
                   i, r.proof.size(), n, proof_bytes, chunks,
                   toploc::chunk_proof_bytes(rules.proof.k));
  }
  return std::nullopt;
}

namespace {

// Group structure, fixed data sampling and bounds of one group (rows `members` of the file); the
// group's task when its draw checks out. The first finding of the group, in `found`.
std::optional<env::Task> check_group(const rollout::RolloutFile& file, int32_t index,
                                     const std::vector<size_t>& members, const FileContext& c,
                                     int64_t policy_version, const SeenDraws* seen,
                                     std::set<std::tuple<int64_t, int64_t, int64_t>>& draws_here,
                                     std::optional<Finding>& found) {
  const Rules& rules = c.rules;
  const auto& rows = file.rows;
  const auto& first = rows[members.front()];
  const int64_t g_size = rules.rollout.group_size;
  const char* stage = "schema";  // names an exception thrown below
  try {
    if (static_cast<int64_t>(members.size()) != g_size) {
      found = finding("schema", "group {}: {} completions, but rl.group_size is {}", index,
                      members.size(), g_size);
      return std::nullopt;
    }
    for (size_t m : members) {
      const auto& r = rows[m];
      if (r.task_id != first.task_id || r.prompt_tokens != first.prompt_tokens ||
          r.target_length != first.target_length) {
        found =
            finding("schema", "group {}: rows {} and {} differ in task, prompt or length target",
                    index, members.front(), m);
        return std::nullopt;
      }
    }

    // Fixed data sampling: the prompt, length target and seeds of place i of the draw.
    stage = "data sampling";
    const auto [draw, task_id] = draw_of(first, rules.partial_rollouts);
    const std::string at = fmt::format("group {} (draw: step {}, submission {}, place {})", index,
                                       draw.step, draw.submission, draw.index);
    if (draw.step > first.step) {
      found = finding("data sampling", "{}: drawn for step {}, after the file's step {}", at,
                      draw.step, first.step);
      return std::nullopt;
    }
    if (!draws_here.insert({draw.step, draw.submission, draw.index}).second) {
      found = finding("data sampling", "{}: the file holds this drawn prompt twice", at);
      return std::nullopt;
    }
    if (seen) {
      const auto used = seen->find({first.node_address, draw.step, draw.submission, draw.index});
      if (used != seen->end() &&
          used->second != std::make_pair<int64_t, int64_t>(first.step, first.submission)) {
        found = finding("data sampling", "{}: already submitted in step {} submission {}", at,
                        used->second.first, used->second.second);
        return std::nullopt;
      }
    }
    env::Task task;
    try {
      task = c.tasks.at(rollout::sample_prompt_index(first.node_address, draw.step, draw.submission,
                                                     draw.index, rules.dataset_size),
                        "fixed data sampling");
    } catch (const Error& e) {
      found = finding("data sampling", "{}: {}", at, e.what());
      return std::nullopt;
    }
    if (task_id != task.task_id) {
      found = finding("data sampling", "{}: task '{}', but fixed data sampling assigns '{}'", at,
                      task_id, task.task_id);
      return std::nullopt;
    }
    // draw.index < 2^31 (parse_drawn_task_id, or the schema's group_index): no overflow.
    const uint64_t base = rollout::sampling_seed(first.node_address, draw.step, draw.submission) +
                          static_cast<uint64_t>(draw.index) * static_cast<uint64_t>(g_size);
    const int64_t target = rules.rollout.length.draw_target(base);
    if (first.target_length != target) {
      found = finding("data sampling", "{}: length target {}, but the draw assigns {}", at,
                      first.target_length, target);
      return std::nullopt;
    }
    const auto prompt = rl::encode_prompt(
        c.prompting, c.environment.build_prompt(task, {.system_prompt = rules.rollout.system_prompt,
                                                       .length_target = target}));
    if (first.prompt_tokens != prompt) {
      found = finding("data sampling",
                      "{}: the prompt tokens are not task '{}' rendered as the run renders it", at,
                      task.task_id);
      return std::nullopt;
    }
    std::vector<uint64_t> seeds;
    for (size_t m : members) seeds.push_back(static_cast<uint64_t>(rows[m].seed));
    std::sort(seeds.begin(), seeds.end());
    for (int64_t j = 0; j < g_size; ++j) {
      if (seeds[j] != base + static_cast<uint64_t>(j)) {
        found = finding("data sampling", "{}: sample seeds are not {} .. {}", at, base,
                        base + static_cast<uint64_t>(g_size) - 1);
        return std::nullopt;
      }
    }

    // Bounds: rewards as the run computes them, advantages by the group formula.
    stage = "bounds";
    std::vector<double> rewards;
    for (size_t m : members) {
      if ((found = check_row_bounds(rows[m], m, rules, policy_version))) return std::nullopt;
      rewards.push_back(rows[m].reward);
    }
    const auto advantages = rl::group_advantages(rewards, rules.normalize_std);
    for (size_t j = 0; j < members.size(); ++j) {
      if (!close(rows[members[j]].advantage, advantages[j], 1e-3)) {
        found = finding("bounds", "row {}: advantage {}, but the group's rewards give {}",
                        members[j], rows[members[j]].advantage, advantages[j]);
        return std::nullopt;
      }
    }
    return task;
  } catch (const CannotJudge&) {
    throw;
  } catch (const std::exception& e) {
    found = finding(stage, "group {} (rows {}..): checking it failed: {}", index, members.front(),
                    message_of(e));
    return std::nullopt;
  }
}

// Up to `cap` of `candidates`, drawn at random (all of them when there are no more than `cap`),
// in file order.
std::vector<size_t> sample_rows(std::vector<size_t> candidates, int64_t cap, std::mt19937_64& rng) {
  if (static_cast<int64_t>(candidates.size()) > cap) {
    std::shuffle(candidates.begin(), candidates.end(), rng);
    candidates.resize(static_cast<size_t>(cap));
    std::sort(candidates.begin(), candidates.end());
  }
  return candidates;
}

}  // namespace

std::vector<Finding> check_file(const rollout::RolloutFile& file, const FileContext& c,
                                int64_t policy_version, const SeenDraws* seen) {
  const Rules& rules = c.rules;
  const auto& rows = file.rows;
  std::vector<Finding> found;
  if (rows.empty()) return {{"schema", "the file has no rows"}};
  if (static_cast<int64_t>(rows.size()) > rules.max_file_rows) {
    return {{"schema", fmt::format("the file has {} rows, more than validator.max_file_rows = {}",
                                   rows.size(), rules.max_file_rows)}};
  }
  Budget own_budget(rules.max_file_seconds);
  Budget& budget = c.budget ? *c.budget : own_budget;

  // Every field of every row first: the checks below index and compute with them.
  const int64_t g_size = rules.rollout.group_size;
  const auto groups = (static_cast<int64_t>(rows.size()) + g_size - 1) / g_size;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (budget.spent()) return {budget.finding(fmt::format("the schema of row {}", i))};
    if (auto f = check_row_schema(rows[i], i, c, groups)) found.push_back(std::move(*f));
  }
  if (!found.empty()) return found;
  const auto stops = stop_ids(c.prompting);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (auto f = check_row_ending(rows[i], i, stops, rules.rollout.max_tokens))
      found.push_back(std::move(*f));
  }

  std::set<std::tuple<int64_t, int64_t, int64_t>> draws_here;
  std::vector<std::optional<env::Task>> tasks(rows.size());  // for the reward re-check
  for (const auto& [index, members] : groups_of(rows)) {
    if (budget.spent()) {
      found.push_back(budget.finding(fmt::format("group {}", index)));
      return found;
    }
    std::optional<Finding> f;
    const auto task = check_group(file, index, members, c, policy_version, seen, draws_here, f);
    if (f) found.push_back(std::move(*f));
    if (task)
      for (size_t m : members) tasks[m] = *task;
  }
  if (!found.empty()) return found;  // rejected already: the verifier's time is not spent on it

  // The verifier again (the most expensive check here: last), on a random sample of the
  // completions the worker cannot predict.
  std::vector<size_t> candidates;
  for (size_t i = 0; i < rows.size(); ++i)
    if (tasks[i]) candidates.push_back(i);
  std::mt19937_64 own_rng(std::random_device{}());
  for (size_t i : sample_rows(candidates, rules.max_reward_checks, c.rng ? *c.rng : own_rng)) {
    if (budget.spent()) {
      found.push_back(budget.finding(fmt::format("the reward of row {}", i)));
      return found;
    }
    const auto& r = rows[i];
    try {
      const std::string text =
          json_safe_text(c.prompting.tok.decode(r.completion_tokens, /*skip_special=*/true));
      const auto score = c.environment.score(*tasks[i], text);
      if (!close(r.task_reward, score.reward, 1e-5))
        found.push_back(*finding("reward", "row {}: task_reward {}, but the verifier gives {} ({})",
                                 i, r.task_reward, score.reward, score.reason));
    } catch (const CannotJudge&) {
      throw;
    } catch (const std::exception& e) {
      found.push_back(*finding("reward", "row {}: the verifier failed on the completion: {}", i,
                               message_of(e)));
    }
  }
  if (budget.spent()) found.push_back(budget.finding("the end of the file checks"));
  return found;
}

void remember_draws(const rollout::RolloutFile& file, bool partial_rollouts, SeenDraws& seen) {
  for (const auto& r : file.rows) {
    const auto [draw, task_id] = draw_of(r, partial_rollouts);
    seen[{r.node_address, draw.step, draw.submission, draw.index}] = {r.step, r.submission};
  }
}

}  // namespace trellis::validator
