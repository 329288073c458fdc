// RMSNorm, SwiGLU and RoPE on an NVIDIA GPU, forward and backward, each one kernel: the CUDA
// counterparts of model/fused_ops.h's CPU loops, with the same numerics (fp32 inside, results
// rounded to the compute dtype where Hugging Face rounds them). Composed from ATen ops they cost
// about 8, 2 and 9 kernels forward (and more backward), each a full pass over memory: in a CUDA
// graph of a decode step that is most of a layer's nodes, and in training most of the time that is
// not a matmul.
//
// Plain C++ on both sides (no libtorch, no CUDA headers here), so that nvcc compiles the kernels
// alone; model/fused_ops.cpp calls them when built with TRELLIS_CUDA_KERNELS. Every pointer is
// device memory, every tensor contiguous; `bf16` picks bfloat16 elements, else float32. Each
// function launches on `stream` (a cudaStream_t) and returns nullptr, or the CUDA error's text.
#pragma once

#include <cstdint>

namespace trellis::model::cuda {

// Widest row rms_norm_backward takes: its block keeps the row's weight gradient in shared memory,
// within the 48 KiB a block has without opting in to more (less the block's own scratch).
constexpr int64_t kRmsNormMaxDim = 12032;

// y[r] = w * round(x[r] * rstd[r]), rstd[r] = 1 / sqrt(mean(x[r]^2) + eps), over `rows` rows of
// `dim`; w is the fp32 weight rounded to the element type; rstd is written (fp32, [rows]).
struct RmsNormArgs {
  const void* x = nullptr;
  const float* weight = nullptr;
  void* y = nullptr;
  float* rstd = nullptr;
  int64_t rows = 0, dim = 0;
  float eps = 0;
  bool bf16 = false;
  void* stream = nullptr;
};
const char* rms_norm_forward(const RmsNormArgs& args);

// The gradients of rms_norm_forward: grad_x [rows, dim] in the element type, and the weight's
// gradient as fp32 partial sums [rms_norm_backward_blocks(rows), dim] for the caller to add up
// (a fixed order: the same bits on every run, unlike atomics).
struct RmsNormBackwardArgs {
  const void* x = nullptr;
  const float* weight = nullptr;
  const void* grad_y = nullptr;
  const float* rstd = nullptr;
  void* grad_x = nullptr;
  float* grad_weight_partial = nullptr;
  int64_t rows = 0, dim = 0;
  bool bf16 = false;
  void* stream = nullptr;
};
int64_t rms_norm_backward_blocks(int64_t rows);
const char* rms_norm_backward(const RmsNormBackwardArgs& args);

// y = silu(gate) * up over n elements; and its gradients.
const char* swiglu_forward(const void* gate, const void* up, void* y, int64_t n, bool bf16,
                           void* stream);
const char* swiglu_backward(const void* gate, const void* up, const void* grad_y, void* grad_gate,
                            void* grad_up, int64_t n, bool bf16, void* stream);

// x: [..., tokens, heads, head_dim] as `rows` = numel / head_dim rows; cos, sin: fp32 [tokens,
// head_dim / 2], rounded to the element type. Rotates each row's two halves by its token's angle
// times `sign` (-1: the backward pass, the transpose of the rotation) into out.
struct RopeArgs {
  const void* x = nullptr;
  const float* cos = nullptr;
  const float* sin = nullptr;
  void* out = nullptr;
  int64_t rows = 0, tokens = 0, heads = 0, head_dim = 0;
  float sign = 1;
  bool bf16 = false;
  void* stream = nullptr;
};
const char* rope(const RopeArgs& args);

}  // namespace trellis::model::cuda
