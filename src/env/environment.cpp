// Prompt building and seeded task lists shared by every environment (see environment.h).
#include "env/environment.h"

#include "common/error.h"
#include "common/rng.h"
#include "env/length_reward.h"

namespace trellis::env {

std::vector<Message> Environment::build_prompt(const Task& task,
                                               const PromptOptions& options) const {
  std::vector<Message> messages;
  const std::string system =
      options.system_prompt.empty() ? system_prompt() : options.system_prompt;
  // A task that brings its own system message keeps it.
  const bool own_system = !task.messages.empty() && task.messages.front().role == "system";
  if (!system.empty() && !own_system) messages.push_back({"system", system});
  if (task.messages.empty()) {
    messages.push_back({"user", task.prompt});
  } else {
    messages.insert(messages.end(), task.messages.begin(), task.messages.end());
  }
  if (options.length_target > 0) {
    for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
      if (it->role != "user") continue;
      it->content += "\n\n" + length_sentence(options.length_target);
      break;
    }
  }
  return messages;
}

Task generated_task(const Environment& env, uint64_t seed, int difficulty) {
  Task t;
  t.env = env.name();
  t.task_id = fmt::format("{}-d{}-{:016x}", t.env, difficulty, seed);
  t.metadata = {{"difficulty", difficulty}};  // the seed is in the id (JSON numbers lose 64 bits)
  return t;
}

std::vector<Task> generate_tasks(const Environment& env, int64_t n, uint64_t seed, int difficulty,
                                 int64_t first) {
  check_difficulty(difficulty, "generate_tasks");
  std::vector<Task> tasks;
  tasks.reserve(n);
  for (int64_t i = first; i < first + n; ++i) {
    // Task i's seed: a Philox draw keyed by the run seed, so nearby run seeds give unrelated tasks.
    const auto r = philox4x32({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0x7a5c, 0},
                              {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    tasks.push_back(env.generate((static_cast<uint64_t>(r[0]) << 32) | r[1], difficulty));
  }
  return tasks;
}

void check_task(const Environment& env, const Task& task, const std::string& where) {
  if (task.env != env.name()) {
    fail(where, "task '{}' is for environment '{}', not '{}'", task.task_id, task.env, env.name());
  }
  env.validate(task, where);
}

std::vector<Task> load_tasks_for(const Environment& env, const std::filesystem::path& path) {
  return load_tasks(
      path, [&](const Task& task, const std::string& where) { check_task(env, task, where); });
}

void check_difficulty(int difficulty, const std::string& where) {
  if (difficulty < kMinDifficulty || difficulty > kMaxDifficulty) {
    fail(where, "difficulty must be in [{}, {}], got {}", kMinDifficulty, kMaxDifficulty,
         difficulty);
  }
}

}  // namespace trellis::env
