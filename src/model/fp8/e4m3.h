// FP8 E4M3 ("e4m3fn", as in the OCP FP8 spec, DeepSeek-V3 and Jet-RL): 1 sign bit, 4 exponent
// bits (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN, so the largest value is
// 448 = 1.75 x 2^8; subnormals are m x 2^-9 for m = 1..7.
//
// libtorch 1.13 has no float8 dtype, so codes are stored as uint8 and converted here:
// - encode rounds to nearest, ties to even, and saturates: any |x| beyond 448 (infinities too)
//   becomes +-448, never NaN (libtorch's float8_e4m3fn cast turns |x| >= 480 into NaN; below
//   that the two agree);
// - NaN becomes the NaN code with its sign, so a NaN in a tensor stays visible after quantising.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace trellis::model::fp8 {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr uint8_t kE4M3NaN = 0x7F;

uint8_t encode_e4m3(float x);
float decode_e4m3(uint8_t code);

// Element-wise, any shape: float32 in, uint8 codes out, and back (decode gives float32).
torch::Tensor encode_e4m3(const torch::Tensor& x);
torch::Tensor decode_e4m3(const torch::Tensor& codes);

}  // namespace trellis::model::fp8
