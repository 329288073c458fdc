// Trainer: one rollout step of the GRPO-family update (specs/rl.md §1–3).
//
// Given B rollouts with advantages: logp_old for every completion token, computed once with the
// weights at the start of the step (no grad); then `optimizer_steps` AdamW steps, each on the
// next B/n rollouts, packed first-fit-decreasing into micro-batches whose gradients accumulate,
// with the loss normalised over the whole optimizer step (token, sequence or constant). The
// reference model (kl_coef > 0) is the frozen initial policy.
//
// The same class serves the single-process loop (`trellis rl`) and the distributed trainer, so
// both train identically on identical data.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/config.h"
#include "model/transformer.h"
#include "rl/loss.h"
#include "rl/metrics_log.h"
#include "rl/optimizer.h"
#include "rl/rollouts.h"

namespace trellis::rl {

struct TrainerConfig {
  LossConfig loss;
  OptimizerConfig optimizer;
  int64_t optimizer_steps = 1;        // per rollout step
  int64_t micro_batch_tokens = 4096;  // packing capacity
  int64_t max_completion_tokens = 0;  // the cap LossNorm::Constant divides by
  int64_t vocab_limit = 0;            // softmax over ids below this (the tokenizer's size)

  // [trainer], [loss] and rl.max_tokens; Error naming the key when a value is unusable.
  static TrainerConfig from_config(const Config& config);
};

class Trainer {
 public:
  // `policy` is trained in place; `reference` (may be null) must be given iff loss.kl_coef > 0.
  // `peak_flops` (the same-run matmul rate) turns FLOPs into MFU; 0 = MFU not reported.
  Trainer(model::Transformer& policy, TrainerConfig config,
          std::unique_ptr<model::Transformer> reference = nullptr, double peak_flops = 0);
  ~Trainer();

  // One rollout step on `batch` (advantages set; behaviour log-probs of every completion token).
  // Metrics: loss, entropy, grad_norm, lr, clip/{low,high,delta}_frac, mismatch/k3,
  // mismatch/masked_{low,high}_frac, time/train, throughput/train_tok_s, throughput/mfu.
  Metrics step(const std::vector<Rollout>& batch);

  Optimizer& optimizer() { return optimizer_; }
  const TrainerConfig& config() const { return config_; }

 private:
  // Per-rollout log-probs of the completion tokens under `model`, without grad.
  std::vector<torch::Tensor> score(model::Transformer& model, const std::vector<Rollout>& batch);

  model::Transformer& policy_;
  TrainerConfig config_;
  std::unique_ptr<model::Transformer> reference_;
  double peak_flops_;
  Optimizer optimizer_;
};

}  // namespace trellis::rl
