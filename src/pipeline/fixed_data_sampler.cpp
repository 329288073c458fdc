#include "pipeline/fixed_data_sampler.h"

#include "rollout/data_sampling.h"

namespace trellis::pipeline {

FixedDataSampler::FixedDataSampler(const rl::TaskSource& tasks, std::string node_address,
                                   const Config& config)
    : tasks_(tasks),
      address_(std::move(node_address)),
      dataset_size_(tasks.dataset_size() > 0
                        ? tasks.dataset_size()
                        : config.get_at_least<int64_t>("infer.dataset_size", 1)) {}

std::vector<env::Task> FixedDataSampler::draw(int64_t step, int64_t submission,
                                              int64_t count) const {
  std::vector<env::Task> out;
  for (int64_t i : rollout::sample_prompt_indices(address_, step, submission, count, dataset_size_))
    out.push_back(tasks_.at(i, "fixed data sampling"));
  return out;
}

uint64_t FixedDataSampler::seed(int64_t step, int64_t submission) const {
  return rollout::sampling_seed(address_, step, submission);
}

}  // namespace trellis::pipeline
