// The FP8 linear layer of Jet-RL's unified precision flow (§4, after DeepSeek-V3): y = x W^T
// where every GEMM takes E4M3 inputs with block scales and accumulates in float32.
//
//   FProp  y  = x (1x128 groups) . W (128x128 blocks)^T
//   DGrad  dx = dy (1x128 groups) . W (the same blocks, transposed)
//   WGrad  dW = dy^T . x, both re-quantised in 128x1 groups (along the tokens, the reduction)
//
// The activation saved for backward is x's FP8 codes and scales, not x. y and dx come out in x's
// dtype (bf16 in training); dW is float32, for the fp32 master. On CPU each GEMM is emulated by
// fp8_gemm (decoded codes are exact in float32, the scaling per K group is as on the GPU).
#pragma once

#include <torch/torch.h>

#include "model/fp8/block_quant.h"

namespace trellis::model::fp8 {

// A weight quantised once (the engine quantises each policy version's weights when they load,
// not per forward): its 128x128-block codes and scales, and the GEMM operand decoded from them.
struct Fp8Weight {
  BlockQuantized blocks;
  GemmOperand operand;
};
Fp8Weight quantize_weight(const torch::Tensor& master);
// A weight stored quantised (an FP8 checkpoint's codes and 128x128 block scales).
Fp8Weight stored_weight(BlockQuantized blocks);

// With autograd: gradients reach x and the fp32 master [out, in]. x: [..., in].
torch::Tensor fp8_linear(const torch::Tensor& x, const torch::Tensor& master);
// Without autograd, on a weight quantised beforehand: the same numbers as the call above.
torch::Tensor fp8_linear(const torch::Tensor& x, const Fp8Weight& weight);

}  // namespace trellis::model::fp8
