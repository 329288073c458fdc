#include "rl/task_source.h"

#include <numeric>

#include "common/error.h"
#include "common/rng.h"

namespace trellis::rl {

TaskSource::TaskSource(const env::Environment& environment, const Config& config, uint64_t seed)
    : environment_(environment), seed_(seed) {
  path_ = config.get<std::string>("env.tasks");
  difficulty_ = static_cast<int>(config.get<int64_t>("env.difficulty"));
  if (!path_.empty()) {
    dataset_ = env::load_tasks_for(environment, path_);
    if (dataset_.empty()) fail(path_, "the dataset has no tasks (env.tasks)");
  } else {
    env::check_difficulty(difficulty_, "env.difficulty");
  }
}

std::vector<env::Task> TaskSource::take(int64_t n) {
  if (dataset_.empty()) {
    auto tasks = env::generate_tasks(environment_, n, seed_, difficulty_, cursor_);
    cursor_ += n;
    return tasks;
  }
  // Epoch e visits the dataset in the order of a shuffle seeded by (seed, e).
  const int64_t size = static_cast<int64_t>(dataset_.size());
  std::vector<env::Task> tasks;
  int64_t epoch = -1;
  std::vector<size_t> order(dataset_.size());
  for (int64_t i = 0; i < n; ++i, ++cursor_) {
    if (cursor_ / size != epoch) {
      epoch = cursor_ / size;
      std::iota(order.begin(), order.end(), 0);
      RandomStream rng(seed_, static_cast<uint32_t>(epoch));
      rng.shuffle(order.begin(), order.end());
    }
    tasks.push_back(dataset_[order[cursor_ % size]]);
  }
  return tasks;
}

std::string TaskSource::describe() const {
  if (dataset_.empty())
    return fmt::format("generated {} tasks (difficulty {})", environment_.name(), difficulty_);
  return fmt::format("{} tasks from {}", dataset_.size(), path_);
}

}  // namespace trellis::rl
