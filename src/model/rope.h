// RoPE tables: the rotary frequencies of a config (with its rope_scaling) and the cos/sin tables
// every forward path indexes by position.
//
// Computed in fp32 in the order Hugging Face's modeling_rope_utils computes them, so that a
// checkpoint's positions agree with `transformers` to rounding: the default inverse frequencies
// theta^(-2i/d); "linear" divides them by the factor; "llama3" divides those with wavelengths
// beyond original_context / low_freq_factor by the factor, keeps those below
// original_context / high_freq_factor and blends linearly in between; "yarn" blends the divided
// and the kept frequency by a ramp over the dimensions whose number of rotations over the
// pretraining context lies between beta_slow and beta_fast, and multiplies cos and sin by its
// attention factor (0.1 ln(factor) + 1 unless given).
//
// The angles are fp32 (position times frequency, one correctly rounded product); their cos and
// sin are taken in fp64 and rounded to fp32. So each entry is the correctly rounded value of its
// fp32 angle (but for a tie one in billions), whatever the table's length, the thread count, the
// SIMD width or the device: a table grown later holds the same bits as one built whole, and a CUDA
// worker's table is the CPU validator's.
#pragma once

#include <torch/torch.h>

#include "model/hf_config.h"

namespace trellis::model {

struct RopeTables {
  torch::Tensor cos, sin;  // [positions, head_dim / 2], fp32
};

// [head_dim / 2] fp32 inverse frequencies (radians per position).
torch::Tensor rope_inv_freq(const HfConfig& config);
// The factor cos and sin are multiplied by (1 but for yarn).
double rope_attention_factor(const RopeScaling& scaling);
// The tables of positions [0, positions).
RopeTables rope_tables(const HfConfig& config, int64_t positions, const torch::Device& device);

}  // namespace trellis::model
