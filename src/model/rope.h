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
#pragma once

#include <torch/torch.h>

#include "model/hf_config.h"

namespace trellis::model {

struct RopeTables {
  torch::Tensor cos, sin;  // [max_position_embeddings, head_dim / 2], fp32
};

// [head_dim / 2] fp32 inverse frequencies (radians per position).
torch::Tensor rope_inv_freq(const HfConfig& config);
// The factor cos and sin are multiplied by (1 but for yarn).
double rope_attention_factor(const RopeScaling& scaling);
RopeTables rope_tables(const HfConfig& config, const torch::Device& device);

}  // namespace trellis::model
