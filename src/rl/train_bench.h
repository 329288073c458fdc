// Training benchmark behind `trellis bench train`: full RL steps of the trainer (logp_old forward,
// GRPO loss with IcePop, backward, AdamW) on synthetic rollouts, reported as tokens/s and MFU
// against the matmul rate measured on the same machine, in the same dtype, in the same run.
#pragma once

#include <cstdint>
#include <functional>

#include "model/transformer.h"

namespace trellis::rl {

struct TrainBenchOptions {
  int64_t batch = 64;                 // rollouts per step
  int64_t prompt_len = 128;           // prompt tokens per rollout
  int64_t completion_len = 512;       // completion lengths are drawn from [len/2, len]
  int64_t steps = 3;                  // timed steps, after one untimed warm-up step
  int64_t optimizer_steps = 1;        // per rollout step
  int64_t micro_batch_tokens = 4096;  // packing capacity
  uint64_t seed = 0;
  bool fp8 = false;  // the trainer's forward and backward in FP8 (rl.precision = "fp8")
  bool activation_checkpointing = false;  // trainer.activation_checkpointing
};

struct TrainBenchResult {
  int64_t steps = 0, tokens = 0;  // tokens: prompt + completion tokens fed per step, summed
  double seconds = 0, logp_old_seconds = 0, tokens_per_s = 0, matmul_flops = 0, mfu = 0;
  double final_loss = 0;
};

TrainBenchResult bench_train(model::Transformer& model, const TrainBenchOptions& options,
                             const std::function<void(int64_t step, double loss)>& on_step = {});

}  // namespace trellis::rl
