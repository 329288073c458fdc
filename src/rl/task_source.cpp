#include "rl/task_source.h"

#include "common/error.h"

namespace trellis::rl {

TaskSource::TaskSource(const env::Environment& environment, const Config& config, uint64_t seed)
    : environment_(environment), seed_(seed) {
  path_ = config.get<std::string>("env.tasks");
  difficulty_ = static_cast<int>(config.get<int64_t>("env.difficulty"));
  if (!path_.empty()) {
    dataset_ = env::load_tasks_for(environment, path_);
    if (dataset_.empty()) fail(path_, "the dataset has no tasks (env.tasks)");
    order_.emplace(dataset_.size(), seed);
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
  std::vector<env::Task> tasks;
  for (int64_t i = 0; i < n; ++i) tasks.push_back(dataset_[order_->at(cursor_++)]);
  return tasks;
}

env::Task TaskSource::at(int64_t index, const std::string& where) const {
  if (index < 0 || (!dataset_.empty() && index >= dataset_size()))
    fail(where, "task index {} is outside the dataset (0..{})", index, dataset_size() - 1);
  if (dataset_.empty()) return env::generate_tasks(environment_, 1, seed_, difficulty_, index)[0];
  return dataset_[static_cast<size_t>(index)];
}

std::string TaskSource::describe() const {
  if (dataset_.empty())
    return fmt::format("generated {} tasks (difficulty {})", environment_.name(), difficulty_);
  return fmt::format("{} tasks from {}", dataset_.size(), path_);
}

}  // namespace trellis::rl
