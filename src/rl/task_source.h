// Task source: the prompts a training run draws, in a reproducible order that resumes from a
// cursor. Either a JSONL dataset (`env.tasks`), visited in a fresh seeded shuffle each epoch, or
// the environment's generator, where the task at cursor i is generated from (seed, i).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/config.h"
#include "env/environment.h"
#include "rl/epoch_order.h"

namespace trellis::rl {

class TaskSource {
 public:
  // From [env] of `config` (tasks, difficulty); `seed` orders the tasks.
  TaskSource(const env::Environment& environment, const Config& config, uint64_t seed);

  // The next n tasks; advances the cursor.
  std::vector<env::Task> take(int64_t n);
  // The task at `index` of the dataset in file order, or the generator's task `index` (fixed data
  // sampling draws indices; specs/toploc.md §5). Error naming `where` when out of range.
  env::Task at(int64_t index, const std::string& where) const;
  // Tasks in the dataset; 0 for generated tasks (any index >= 0 is valid).
  int64_t dataset_size() const { return static_cast<int64_t>(dataset_.size()); }
  int64_t cursor() const { return cursor_; }
  void set_cursor(int64_t cursor) { cursor_ = cursor; }
  // "N tasks from FILE" or "generated tasks (difficulty D)".
  std::string describe() const;

 private:
  const env::Environment& environment_;
  uint64_t seed_;
  int difficulty_ = 0;
  std::string path_;
  std::vector<env::Task> dataset_;   // empty: generated tasks
  std::optional<EpochOrder> order_;  // of dataset_
  int64_t cursor_ = 0;
};

}  // namespace trellis::rl
