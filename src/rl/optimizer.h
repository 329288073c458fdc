// Optimizer: AdamW over fp32 master weights with linear warm-up then constant learning rate, and
// global-norm gradient clipping (specs/rl.md §3), shared by `trellis sft` and `trellis rl`.
//
// Sharded across the trainer's ranks (ZeRO-2, rl/process_group.h): the parameters are laid end to
// end as one flat vector of P elements and rank r owns elements [r·S, (r+1)·S), S = ⌈P/N⌉. After
// the backward passes every rank holds gradients for its own samples; step() reduce-scatters them
// (each rank receives the sum of its slice), takes the global norm (an all-reduce of the squared
// norms), and updates its slice of the fp32 master weights and AdamW moments. An all-gather then
// gives every rank the whole updated weights. So each rank holds 3·P/N floats of optimizer state
// (masters and two moments) beside the model's working weights; with one rank the model's fp32
// weights are the masters themselves. N ranks compute what one would, up to summation order.
//
// Checkpoints (save/load) are sharded: DIR/optimizer/index.json plus one safetensors file per rank
// holding its slice of the moments; a checkpoint written by N ranks loads on any number of ranks.
// Only rank 0 touches the disk: the other ranks' slices travel through the process group.
//
// The state lives on the parameters' device. The update is a few kernels for the whole model
// however many tensors it has: the moments are flat vectors, the masters take foreach ops, and on
// CUDA libtorch's fused Adam kernel does the rest in one pass.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace trellis {
class Config;
}

namespace trellis::rl {

class ProcessGroup;

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
  // `group` (null = one rank) must outlive the optimizer. Collective with several ranks: every
  // rank passes the same parameters, and they take rank 0's values.
  Optimizer(std::vector<torch::Tensor> parameters, OptimizerConfig config,
            ProcessGroup* group = nullptr);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  struct StepInfo {
    double grad_norm = 0;  // global L2 norm of the gradients (all ranks summed), before clipping
    double lr = 0;         // the learning rate this step used
  };
  // Collective. Sums the ranks' gradients, clips them, applies one AdamW update at the warm-up
  // learning rate to every parameter (one without a gradient counts as zero) and zeroes the
  // gradients. A non-finite gradient norm skips the update (gradients are still zeroed).
  StepInfo step();
  int64_t steps() const { return steps_; }
  double lr_at(int64_t step) const;

  // Bytes of fp32 master weights and AdamW moments this rank holds (its share of the state).
  int64_t state_bytes() const;

  // Collective: writes DIR/optimizer/ (rank 0 writes; `dir` is ignored on the others).
  void save(const std::filesystem::path& dir);
  // Collective: rank 0 reads DIR/optimizer/ (or a single-rank optimizer.pt of older checkpoints)
  // and hands each rank its slice. Error naming the file when it is missing or does not fit.
  void load(const std::filesystem::path& dir);

 private:
  // Where this rank's slice [begin_, end_) of the flat parameter vector lives.
  struct Segment {
    torch::Tensor master;  // fp32 view of `length` elements
    int64_t offset = 0;    // within this rank's slice
  };
  // Rank r's slice [begin, end) of the flat vector.
  std::pair<int64_t, int64_t> slice_of(int rank) const;
  // The parameters (or their gradients, zero where undefined) end to end, padded to world · S.
  torch::Tensor flatten(bool grads) const;
  // One AdamW update of every segment from this rank's (clipped) slice of the gradient.
  void adamw_update(const torch::Tensor& grad, double lr);
  void load_moments(const std::filesystem::path& dir, torch::Tensor& m, torch::Tensor& v,
                    int64_t& steps, int64_t& adam_steps) const;

  std::vector<torch::Tensor> parameters_;
  OptimizerConfig config_;
  ProcessGroup* group_;
  int rank_ = 0, world_ = 1;
  std::vector<int64_t> offsets_;  // of each parameter in the flat vector
  int64_t total_ = 0;             // P
  int64_t shard_ = 0;             // S
  int64_t begin_ = 0, end_ = 0;   // this rank's slice
  torch::Tensor masters_;         // fp32 [end_ - begin_], only with several ranks
  torch::TensorOptions state_options_ = torch::kFloat32;  // fp32 on the parameters' device
  torch::Tensor exp_avg_, exp_avg_sq_;
  std::vector<Segment> segments_;  // the non-empty ones (foreach ops refuse empty lists)
  int64_t steps_ = 0;              // step() calls
  int64_t adam_steps_ = 0;         // updates applied (AdamW's bias correction counts these)
};

}  // namespace trellis::rl
