// `trellis eval` and `trellis filter`: k samples per task from a model, scored by an environment.
// eval reports pass@1, pass@k (unbiased estimator), mean reward and length, with per-task results
// as JSONL; filter keeps the tasks whose pass rate lies in [low, high] (INTELLECT-2's offline
// difficulty filtering: too easy and too hard tasks carry no learning signal).
#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/env_flags.h"
#include "cli/progress.h"
#include "common/error.h"
#include "common/files.h"
#include "common/logging.h"
#include "env/pass_at_k.h"
#include "env/registry.h"
#include "model/checkpoint.h"
#include "rl/rollouts.h"

namespace trellis::cli {
namespace {

struct SamplingFlags {
  std::string model, tasks, out;
  EnvFlags env;
  int64_t n = 0, k = 1, max_tokens = 1024, max_num_seqs = 256;
  engine::SamplingParams sampling;
  uint64_t seed = 0;
  ComputeFlags compute;
};

struct Loaded {
  std::unique_ptr<env::Environment> environment;
  std::vector<env::Task> tasks;
  rl::RolloutOptions options;
};

// The environment, its tasks (from --tasks, or --n generated ones) and the sampling options.
Loaded load(const SamplingFlags& f, const char* command) {
  Loaded l;
  const Config config = f.env.config();
  l.environment = env::make_environment(config);
  if (!f.tasks.empty()) {
    if (f.n > 0) fail(command, "give --tasks FILE or --n N, not both");
    l.tasks = env::load_tasks_for(*l.environment, f.tasks);
  } else {
    const std::string dataset = config.get<std::string>("env.tasks");
    if (!dataset.empty() && f.n == 0) {
      l.tasks = env::load_tasks_for(*l.environment, dataset);
    } else {
      if (f.n <= 0) fail(command, "give --tasks FILE (a JSONL dataset) or --n N (generated tasks)");
      l.tasks = env::generate_tasks(*l.environment, f.n, f.seed, f.env.resolved_difficulty(config));
    }
  }
  l.options.group_size = f.k;
  l.options.max_tokens = f.max_tokens;
  l.options.sampling = f.sampling;
  l.options.seed = f.seed;
  l.options.system_prompt = config.get<std::string>("env.system_prompt");
  l.options.length = env::LengthReward::from_config(config);
  return l;
}

std::vector<rl::RolloutGroup> sample(const SamplingFlags& f, const Loaded& l) {
  auto compute = setup_compute(f.compute);
  auto transformer = model::load_transformer(f.model, compute);
  const auto prompting = model::Prompting::load(f.model, transformer->config());
  engine::EngineOptions options;
  options.max_num_seqs = f.max_num_seqs;
  options.vocab_limit = prompting.tok.vocab_size();
  engine::Engine engine(*transformer, options);
  log::info("{}: {} tasks x {} samples from {} on {}", l.environment->name(), l.tasks.size(), f.k,
            f.model, compute.describe());
  Progress progress("completions");
  rl::RolloutOptions rollout = l.options;
  rollout.on_progress = [&](int64_t done, int64_t total, int64_t tokens) {
    progress.draw(done, total, tokens);
  };
  auto groups = rl::generate_rollouts(engine, prompting, *l.environment, l.tasks, rollout);
  progress.finish();
  return groups;
}

Json sample_json(const rl::Rollout& s) {
  return {{"text", s.text},     {"tokens", s.tokens()},         {"finish_reason", s.finish},
          {"reward", s.reward}, {"task_reward", s.task_reward}, {"reason", s.reason}};
}

void run_eval(const SamplingFlags& f) {
  const Loaded l = load(f, "trellis eval");
  const auto results = sample(f, l);
  double pass1 = 0, passk = 0, reward = 0, task_reward = 0, length = 0, truncated = 0;
  int64_t samples = 0, max_length = 0;
  std::string jsonl;
  for (size_t t = 0; t < results.size(); ++t) {
    const auto& r = results[t];
    const int64_t c = r.passed();
    const double p1 = env::pass_at_k(f.k, c, 1), pk = env::pass_at_k(f.k, c, f.k);
    pass1 += p1;
    passk += pk;
    Json row{{"task_id", l.tasks[t].task_id}, {"passed", c}, {"pass@1", p1}, {"pass@k", pk}};
    if (r.length_target > 0) row["length_target"] = r.length_target;
    row["samples"] = Json::array();
    for (const auto& s : r.rollouts) {
      reward += s.reward;
      task_reward += s.task_reward;
      length += s.tokens();
      max_length = std::max(max_length, s.tokens());
      truncated += s.finish == "length";
      ++samples;
      row["samples"].push_back(sample_json(s));
    }
    jsonl += json_text(row) + "\n";
  }
  if (!f.out.empty()) write_file_atomic(f.out, jsonl);
  const double tasks = static_cast<double>(results.size());
  std::printf("%s: %zu tasks x %lld samples\n", l.environment->name().c_str(), results.size(),
              static_cast<long long>(f.k));
  std::printf("pass@1       %.4f\n", pass1 / tasks);
  std::printf("pass@%-7lld %.4f\n", static_cast<long long>(f.k), passk / tasks);
  std::printf("reward       %.4f (task %.4f)\n", reward / samples, task_reward / samples);
  std::printf("length       %.1f tokens (max %lld, %.1f%% cut at --max-tokens)\n", length / samples,
              static_cast<long long>(max_length), 100.0 * truncated / samples);
  if (!f.out.empty()) std::printf("per-task results -> %s\n", f.out.c_str());
}

struct FilterFlags {
  SamplingFlags sampling;
  double low = 0.125, high = 0.5;
};

void run_filter(const FilterFlags& ff) {
  const SamplingFlags& f = ff.sampling;
  if (!(ff.low <= ff.high)) fail("trellis filter", "--low {} is above --high {}", ff.low, ff.high);
  const Loaded l = load(f, "trellis filter");
  const auto results = sample(f, l);
  std::map<int64_t, int64_t> histogram;  // passing samples -> tasks
  std::string kept;
  int64_t kept_count = 0;
  for (size_t t = 0; t < results.size(); ++t) {
    const int64_t c = results[t].passed();
    ++histogram[c];
    const double rate = static_cast<double>(c) / f.k;
    if (rate < ff.low || rate > ff.high) continue;
    Json task = env::task_to_json(l.tasks[t]);
    task["metadata"]["pass_rate"] = rate;  // what the filter saw, for later curricula
    kept += json_text(task) + "\n";
    ++kept_count;
  }
  write_file_atomic(f.out, kept);
  std::printf("pass rate over %lld samples per task:\n", static_cast<long long>(f.k));
  for (int64_t c = 0; c <= f.k; ++c) {
    const double rate = static_cast<double>(c) / f.k;
    std::printf("  %lld/%lld  %6lld tasks%s\n", static_cast<long long>(c),
                static_cast<long long>(f.k), static_cast<long long>(histogram[c]),
                rate >= ff.low && rate <= ff.high ? "  kept" : "");
  }
  std::printf("kept %lld of %zu tasks (pass rate in [%g, %g]) -> %s\n",
              static_cast<long long>(kept_count), results.size(), ff.low, ff.high, f.out.c_str());
}

void add_task_sampling_flags(CLI::App* cmd, SamplingFlags& f, bool filter) {
  cmd->add_option("--model", f.model, "Hugging Face model directory")->required();
  add_env_flags(cmd, f.env, /*env_required=*/false);
  auto* tasks = cmd->add_option("--tasks", f.tasks, "JSONL dataset of tasks");
  if (filter) {
    tasks->required();
  } else {
    cmd->add_option("--n", f.n, "generate N tasks with the environment's generator")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
    add_difficulty_flag(cmd, f.env);
  }
  cmd->add_option("--k", f.k, "samples per task")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  cmd->add_option("--max-tokens", f.max_tokens, "new tokens per sample at most")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  add_sampling_flags(cmd, f.sampling);
  cmd->add_option("--seed", f.seed, "seed of the samples (and of generated tasks)")
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", f.max_num_seqs, "sequences decoded at once")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  auto* out = cmd->add_option("--out", f.out,
                              filter ? "JSONL of the kept tasks" : "JSONL of per-task results");
  if (filter) out->required();
  add_compute_flags(cmd, f.compute);
}

}  // namespace

void add_eval_commands(CLI::App& app) {
  static SamplingFlags eval;
  auto* eval_cmd = app.add_subcommand(
      "eval", "Sample k completions per task and report pass@1, pass@k, reward and length");
  add_task_sampling_flags(eval_cmd, eval, /*filter=*/false);
  eval_cmd->callback([] { run_eval(eval); });

  static FilterFlags filter;
  filter.sampling.k = 8;
  auto* filter_cmd = app.add_subcommand(
      "filter", "Keep the tasks a model solves neither always nor never (offline filtering)");
  add_task_sampling_flags(filter_cmd, filter.sampling, /*filter=*/true);
  filter_cmd->add_option("--low", filter.low, "lowest pass rate kept")->capture_default_str();
  filter_cmd->add_option("--high", filter.high, "highest pass rate kept")->capture_default_str();
  filter_cmd->callback([] { run_filter(filter); });
}

}  // namespace trellis::cli
