// A worker's prompts by fixed data sampling (rollout/data_sampling.h): the run's task list, the
// worker's address and the size of the space indices are drawn from. Plain workers draw one
// block per (step, submission); C3PO++ pools one per refill (partial_rollouts.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "env/task.h"
#include "rl/task_source.h"

namespace trellis::pipeline {

class FixedDataSampler {
 public:
  // Indices range over the dataset (env.tasks), or over [0, infer.dataset_size) with generated
  // tasks.
  FixedDataSampler(const rl::TaskSource& tasks, std::string node_address, const Config& config);

  // The `count` tasks drawn for (step, submission), in draw order.
  std::vector<env::Task> draw(int64_t step, int64_t submission, int64_t count) const;
  // Draw i's completion j samples with seed(step, submission) + i·G + j.
  uint64_t seed(int64_t step, int64_t submission) const;

 private:
  const rl::TaskSource& tasks_;
  std::string address_;
  int64_t dataset_size_ = 1;
};

}  // namespace trellis::pipeline
