// Environment: a source of tasks and the verifier that scores a model's answers to them.
//
// An environment builds the prompt for a task (chat messages: an optional system prompt stating
// the answer format, the task, and optionally the length-target sentence of length_reward.h),
// parses a completion and returns a reward in [0, 1] with a one-line reason. Its generator makes
// tasks of controllable difficulty, deterministically from a seed, with a reference solution.
//
// Verifiers face untrusted model output: score() never throws on a completion, whatever it holds
// (empty, gigabytes, invalid UTF-8, adversarial expressions); it returns reward 0 and says why.
// A malformed *task* (a dataset problem) is an Error from validate(), naming where it came from.
//
// Adding an environment: one file in environments/ implementing this interface, and one line in
// registry.cpp. Implementations are immutable after construction; const methods are thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "env/task.h"

namespace trellis::env {

struct Score {
  double reward = 0;   // in [0, 1]
  std::string reason;  // why, in one line (e.g. "answer 3/4 equals the expected 0.75")
};

struct PromptOptions {
  // Replaces the environment's system prompt; "" keeps the environment's own.
  std::string system_prompt;
  // > 0: append "Think for T tokens before giving a response." (length_reward.h).
  int64_t length_target = 0;
};

inline constexpr int kMinDifficulty = 1;
inline constexpr int kMaxDifficulty = 10;

class Environment {
 public:
  virtual ~Environment() = default;

  virtual std::string name() const = 0;
  // One line for `trellis env list`: what the tasks are and what difficulty controls.
  virtual std::string description() const = 0;
  // The system prompt sent with every task ("" = none): states how to give the answer.
  virtual std::string system_prompt() const = 0;

  // A task of difficulty in [kMinDifficulty, kMaxDifficulty], a pure function of (seed,
  // difficulty), with a reference `solution` that scores 1. Its task_id is unique per seed.
  virtual Task generate(uint64_t seed, int difficulty) const = 0;
  // Error naming `where` unless the task's verification_info is what score() needs.
  virtual void validate(const Task& task, const std::string& where) const = 0;
  // The reward of `completion` (the model's whole reply) for a validated task.
  virtual Score score(const Task& task, std::string_view completion) const = 0;

  // The chat messages to send: [system prompt], then the task's prompt (its text as one user
  // message, or its own messages), with the length sentence appended to the last user message.
  std::vector<Message> build_prompt(const Task& task, const PromptOptions& options = {}) const;
};

// The skeleton every generator starts from: task_id "<env>-d<difficulty>-<seed as 16 hex digits>",
// env, and metadata {"difficulty"}; the generator fills prompt, verification_info,
// solution.
Task generated_task(const Environment& env, uint64_t seed, int difficulty);

// Tasks first..first+n-1 of the environment's generator for a run seed: task i uses a seed
// derived from (seed, i), so the same (seed, n) gives the same tasks and a larger n extends the
// list.
std::vector<Task> generate_tasks(const Environment& env, int64_t n, uint64_t seed, int difficulty,
                                 int64_t first = 0);

// Error naming `where` unless the task names `env` and passes its validate().
void check_task(const Environment& env, const Task& task, const std::string& where);
// The tasks of a JSONL dataset for `env`, each checked by check_task(). Errors name "file:line".
std::vector<Task> load_tasks_for(const Environment& env, const std::filesystem::path& path);

// Error naming `where` unless difficulty is in [kMinDifficulty, kMaxDifficulty].
void check_difficulty(int difficulty, const std::string& where);

}  // namespace trellis::env
