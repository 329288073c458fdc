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
//
// With several ranks (a ProcessGroup), every rank holds the whole batch and trains its share of
// each optimizer step's samples (balanced by tokens); the loss weights are computed over the whole
// optimizer step, so the gradients the optimizer sums over the ranks, and every metric, are what
// one rank would compute on all of it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/config.h"
#include "model/transformer.h"
#include "rl/loss.h"
#include "rl/metrics_log.h"
#include "rl/optimizer.h"
#include "rl/process_group.h"
#include "rl/rollouts.h"

namespace trellis::rl {

struct TrainerConfig {
  LossConfig loss;
  OptimizerConfig optimizer;
  int64_t optimizer_steps = 1;            // per rollout step
  int64_t micro_batch_tokens = 4096;      // packing capacity
  int64_t max_completion_tokens = 0;      // the cap LossNorm::Constant divides by
  int64_t vocab_limit = 0;                // softmax over ids below this (the tokenizer's size)
  bool fp8 = false;                       // forward and backward in FP8 (rl.precision = "fp8")
  bool activation_checkpointing = false;  // ForwardOptions::recompute_layers in the backward pass

  // [trainer], [loss], rl.max_tokens and rl.precision; Error naming the key when a value is
  // unusable.
  static TrainerConfig from_config(const Config& config);
};

class Trainer {
 public:
  // `policy` is trained in place; `reference` (may be null) must be given iff loss.kl_coef > 0.
  // `peak_flops` (the same-run matmul rate) turns FLOPs into MFU; 0 = MFU not reported.
  // `group` (null = one rank) must outlive the trainer; step() is then collective.
  Trainer(model::Transformer& policy, TrainerConfig config,
          std::unique_ptr<model::Transformer> reference = nullptr, double peak_flops = 0,
          ProcessGroup* group = nullptr);
  ~Trainer();

  // One rollout step on `batch` (advantages set; behaviour log-probs of every completion token).
  // Metrics: loss, entropy, grad_norm, lr, clip/{low,high,delta}_frac, mismatch/k3,
  // mismatch/masked_{low,high}_frac, time/train, throughput/train_tok_s, throughput/mfu (over
  // all ranks), and the time split: time/logp_old, time/forward_backward (with _min and _max over
  // the ranks), time/optimizer, time/comm (inside collectives), memory/optimizer_mib (this rank).
  Metrics step(const std::vector<Rollout>& batch);

  Optimizer& optimizer() { return optimizer_; }
  const TrainerConfig& config() const { return config_; }

 private:
  // Log-probs of the completion tokens of batch[i] for each i in `which` under `model`, without
  // grad (entries of other rollouts stay undefined).
  std::vector<torch::Tensor> score(model::Transformer& model, const std::vector<Rollout>& batch,
                                   const std::vector<size_t>& which);

  model::Transformer& policy_;
  TrainerConfig config_;
  std::unique_ptr<model::Transformer> reference_;
  double peak_flops_;
  ProcessGroup* group_;
  Optimizer optimizer_;
};

// The trainer of an RL run on `policy` (set to require grad): `config` with the softmax over the
// tokenizer's `vocab_limit` ids, and the frozen reference loaded from `base_model` when
// loss.kl_coef > 0. Collective when `group` has several ranks (rl/optimizer.h).
std::unique_ptr<Trainer> make_trainer(TrainerConfig config, int64_t vocab_limit,
                                      model::Transformer& policy,
                                      const std::filesystem::path& base_model,
                                      const model::Compute& compute, double peak_flops,
                                      ProcessGroup* group);

}  // namespace trellis::rl
