// Training throughput benchmark behind `trellis bench train`: forward + backward + AdamW on
// packed random data, reported as tokens/s and MFU against the matmul rate measured on the same
// machine, in the same dtype, in the same run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model/transformer.h"

namespace trellis::model {

// FLOP/s of an n x n x n matmul in the compute dtype (best of several timed repetitions).
double measure_matmul_flops(const Compute& compute, int64_t n = 2048);

// Model FLOPs for one forward+backward over a packed row: 6 * (matmul parameters) * tokens plus
// causal attention, 6 * layers * heads * head_dim * sum(len^2) (QK^T and PV, forward and backward,
// half of each square masked).
double train_flops(const HfConfig& config, int64_t tokens, double sum_sq_lens);

struct TrainBenchOptions {
  int64_t seq_len = 2048;     // tokens per packed row (one forward + backward)
  int64_t micro_batches = 4;  // rows whose gradients accumulate into one optimizer step
  int64_t tokens = 32768;     // tokens to time, after one untimed warm-up step
  int64_t min_sample = 128;   // packed samples have lengths drawn from [min_sample, seq_len/2]
  uint64_t seed = 0;
};

struct TrainBenchResult {
  int64_t steps = 0, tokens = 0;
  double seconds = 0, tokens_per_s = 0, model_flops = 0, achieved_flops = 0, matmul_flops = 0,
         mfu = 0, final_loss = 0;
  double forward_s = 0, backward_s = 0, optimizer_s = 0;  // time split of the timed steps
};

TrainBenchResult bench_train(Transformer& model, const TrainBenchOptions& options,
                             const std::function<void(int64_t step, double loss)>& on_step = {});

}  // namespace trellis::model
