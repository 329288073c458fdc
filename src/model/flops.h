// FLOP accounting for the benchmarks and MFU figures: the model FLOPs of a training pass, and the
// matmul rate this machine reaches in the compute dtype, measured in the same run.
#pragma once

#include <cstdint>

#include "model/transformer.h"

namespace trellis::model {

// FLOP/s of an n x n x n matmul in the compute dtype (best of several timed repetitions).
double measure_matmul_flops(const Compute& compute, int64_t n = 2048);

// Model FLOPs for one forward+backward over a packed row: 6 * (matmul parameters) * tokens plus
// causal attention, 6 * layers * heads * head_dim * sum(len^2) (QK^T and PV, forward and backward,
// half of each square masked).
double train_flops(const HfConfig& config, int64_t tokens, double sum_sq_lens);

}  // namespace trellis::model
