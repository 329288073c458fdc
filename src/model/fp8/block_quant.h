// Block-scaled FP8 (DeepSeek-V3, Jet-RL §4): a 2-D tensor as E4M3 codes with one fp32 scale per
// block of group_rows x group_cols elements, value = decode(code) x scale and
// scale = max(amax of the block, 1e-4) / 448, so each block's largest magnitude lands on 448.
// Activations and gradients use 1 x 128 groups along the GEMM's reduction dimension, weights
// 128 x 128 blocks (the same blocks serve W and its transpose). Edge blocks may be partial.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace trellis::model::fp8 {

inline constexpr int64_t kGroup = 128;
inline constexpr float kAmaxFloor = 1e-4f;  // an all-zero block still gets a finite scale

struct BlockQuantized {
  torch::Tensor codes;   // uint8 [rows, cols]
  torch::Tensor scales;  // float32 [ceil(rows / group_rows), ceil(cols / group_cols)]
  int64_t group_rows = 1, group_cols = kGroup;

  int64_t rows() const { return codes.size(0); }
  int64_t cols() const { return codes.size(1); }
  // The same values as a [cols, rows] tensor: codes and scales transposed, groups swapped.
  BlockQuantized transposed() const;
};

// x: a 2-D float32 tensor (any strides).
BlockQuantized quantize_blocks(const torch::Tensor& x, int64_t group_rows, int64_t group_cols);
// float32 [rows, cols]: each code's value times its block's scale.
torch::Tensor dequantize(const BlockQuantized& q);

// One side of an FP8 GEMM over K (its columns): the decoded codes and each row's scale for each
// group of kGroup columns, in float64. Requires group_cols == kGroup.
struct GemmOperand {
  torch::Tensor values;      // float64 [rows, K]
  torch::Tensor row_scales;  // float64 [rows, ceil(K / kGroup)]
};
GemmOperand gemm_operand(const BlockQuantized& q);

// out[n, m] = sum over groups g of (A_g[n] . B_g[m]) x a.scale[n, g] x b.scale[m, g]: an FP8
// GEMM whose partial sums are scaled per group of kGroup along K (as DeepSeek-V3's kernels promote
// them). a: [N, K], b: [M, K]; float32 [N, M] out.
//
// Each group's dot product is exact: an E4M3 product is a multiple of 2^-18 below 2^17.6, so a sum
// of 128 of them needs at most 43 bits, which float64's 53 hold. The scaling and the sum over
// groups run in float64 in a fixed order and round once to float32. An FP8 tensor core with fp32
// accumulation rounds each addition instead; the emulation is as exact as that or more, and it
// is the same for a row whatever the other rows of the GEMM are: the engine's decode (a few rows)
// and the trainer's packed forward (thousands) give a token the same bits.
torch::Tensor fp8_gemm(const GemmOperand& a, const GemmOperand& b);

}  // namespace trellis::model::fp8
