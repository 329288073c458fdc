// Optimizer: AdamW over the fp32 master weights with linear warm-up then constant learning rate,
// and global-norm gradient clipping (specs/rl.md §3), shared by `trellis sft` and `trellis rl`.
// Its state (moments, step counts) saves and loads exactly, for resuming.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace trellis {
class Config;
}

namespace trellis::rl {

struct OptimizerConfig {
  double lr = 1e-5;
  int64_t warmup_steps = 0;  // lr rises linearly over this many steps: lr * (t + 1) / warmup
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double max_grad_norm = 1.0;  // <= 0: no clipping

  // Reads lr and warmup_steps from `section` (e.g. "sft" or "trainer") and the rest from
  // [trainer]; Error naming the key when a value is out of range.
  static OptimizerConfig from_config(const Config& config, const std::string& section);
};

class Optimizer {
 public:
  Optimizer(std::vector<torch::Tensor> parameters, OptimizerConfig config);
  ~Optimizer();

  struct StepInfo {
    double grad_norm = 0;  // global L2 norm of the gradients, before clipping
    double lr = 0;         // the learning rate this step used
  };
  // Clips the accumulated gradients, applies one AdamW update at the warm-up learning rate and
  // zeroes the gradients. A non-finite gradient norm skips the update (gradients are still zeroed).
  StepInfo step();
  int64_t steps() const { return steps_; }
  double lr_at(int64_t step) const;

  // Moments and step count, exactly (torch serialization).
  void save(const std::filesystem::path& path) const;
  void load(const std::filesystem::path& path);

 private:
  std::vector<torch::Tensor> parameters_;
  OptimizerConfig config_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
  int64_t steps_ = 0;
};

}  // namespace trellis::rl
