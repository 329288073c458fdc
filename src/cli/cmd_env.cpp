// `trellis env list | sample | score`: the environments, their generated tasks, and what their
// verifiers say of a completion.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/commands.h"
#include "cli/env_flags.h"
#include "common/error.h"
#include "common/files.h"
#include "env/registry.h"
#include "env/task.h"

namespace trellis::cli {
namespace {

void run_list() {
  for (const auto& name : env::environment_names()) {
    std::printf("%-15s %s\n", name.c_str(), env::make_environment(name)->description().c_str());
  }
}

struct SampleFlags {
  EnvFlags env;
  int64_t n = 5;
  uint64_t seed = 0;
  std::string out;
};

void run_sample(const SampleFlags& f) {
  const Config config = f.env.config();
  const auto environment = env::make_environment(config);
  const int difficulty = f.env.resolved_difficulty(config);
  const auto tasks = env::generate_tasks(*environment, f.n, f.seed, difficulty);
  if (!f.out.empty()) {
    env::write_tasks(f.out, tasks);
    std::fprintf(stderr, "%zu %s tasks (difficulty %d, seed %llu) -> %s\n", tasks.size(),
                 environment->name().c_str(), difficulty, static_cast<unsigned long long>(f.seed),
                 f.out.c_str());
    return;
  }
  for (const auto& t : tasks) std::cout << json_text(env::task_to_json(t)) << "\n";
}

struct ScoreFlags {
  EnvFlags env;
  std::string task_file, task_id, completion, completion_file;
  bool completion_given = false;  // --completion "" is a legal, if poor, reply
};

void run_score(const ScoreFlags& f) {
  // The environment is --env's, or else the one the file's first task names; it checks every task.
  Config config = f.env.config();
  std::unique_ptr<env::Environment> environment;
  const auto tasks =
      env::load_tasks(f.task_file, [&](const env::Task& t, const std::string& where) {
        if (!environment) {
          if (f.env.env.empty()) config.apply_override("env.name=" + t.env);
          environment = env::make_environment(config);
        }
        env::check_task(*environment, t, where);
      });
  const env::Task* task = nullptr;
  if (!f.task_id.empty()) {
    const auto it = std::find_if(tasks.begin(), tasks.end(),
                                 [&](const env::Task& t) { return t.task_id == f.task_id; });
    if (it == tasks.end()) fail(f.task_file, "no task with task_id '{}'", f.task_id);
    task = &*it;
  } else if (tasks.size() == 1) {
    task = &tasks.front();
  } else {
    fail(f.task_file, "the file holds {} tasks; choose one with --task-id", tasks.size());
  }
  if (f.completion_given == !f.completion_file.empty()) {
    throw Error("give exactly one of --completion TEXT or --completion-file FILE",
                "trellis env score");
  }
  std::string completion = f.completion;
  if (f.completion_file == "-") {
    completion.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else if (!f.completion_file.empty()) {
    completion = read_file(f.completion_file);
  }
  const auto score = environment->score(*task, completion);
  std::printf("reward %g\nreason %s\n", score.reward, score.reason.c_str());
}

}  // namespace

void add_env_commands(CLI::App& app) {
  auto* env_cmd = app.add_subcommand("env", "Reward environments: list, sample tasks, score");
  env_cmd->require_subcommand(1);

  env_cmd->add_subcommand("list", "The environments and what their tasks are")->callback(run_list);

  static SampleFlags sample;
  auto* sample_cmd = env_cmd->add_subcommand(
      "sample", "Generate tasks (JSONL, one per line) with an environment's generator");
  add_env_flags(sample_cmd, sample.env, /*env_required=*/true);
  sample_cmd->add_option("--n", sample.n, "number of tasks")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  sample_cmd->add_option("--seed", sample.seed, "generator seed")->capture_default_str();
  add_difficulty_flag(sample_cmd, sample.env);
  sample_cmd->add_option("--out", sample.out, "write a JSONL file instead of printing");
  sample_cmd->callback([] { run_sample(sample); });

  static ScoreFlags score;
  auto* score_cmd =
      env_cmd->add_subcommand("score", "Score a completion for a task: prints the reward and why");
  add_env_flags(score_cmd, score.env, /*env_required=*/false);
  score_cmd->add_option("--task", score.task_file, "JSONL file with the task")->required();
  score_cmd->add_option("--task-id", score.task_id, "which task, when the file holds several");
  auto* completion = score_cmd->add_option("--completion", score.completion, "the model's reply");
  score_cmd->add_option("--completion-file", score.completion_file,
                        "file holding the model's reply (- = standard input)");
  score_cmd->callback([completion] {
    score.completion_given = completion->count() > 0;
    run_score(score);
  });
}

}  // namespace trellis::cli
