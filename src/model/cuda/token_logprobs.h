// model/token_logprobs.h on an NVIDIA GPU: one thread block per row of logits, forward (an online
// softmax: one read of the row) and backward (one read, one write of its gradient).
//
// Plain C++ on both sides (no libtorch, no CUDA headers here), so that nvcc compiles the kernels
// alone; model/token_logprobs.cpp calls them when built with TRELLIS_CUDA_KERNELS. Every pointer
// is device memory, every array contiguous; logits and their gradient are bf16 when `bf16`, else
// fp32. Each function launches on `stream` (a cudaStream_t) and returns nullptr, or the CUDA
// error's text.
#pragma once

#include <cstdint>

namespace trellis::model::cuda {

// Row r of logits [rows, vocab]: z = logits[r, :limit] * inv_temperature[r]; writes lse[r] =
// logsumexp(z), logp[r] = z[targets[r]] - lse[r] (NaN for a target outside [0, limit)) and
// entropy[r] = lse[r] - Σ softmax(z) z.
struct TokenLogprobsArgs {
  const void* logits = nullptr;
  const int64_t* targets = nullptr;
  const float* inv_temperature = nullptr;
  float* logp = nullptr;
  float* lse = nullptr;
  float* entropy = nullptr;
  int64_t rows = 0, vocab = 0, limit = 0;
  bool bf16 = false;
  void* stream = nullptr;
};
const char* token_logprobs_forward(const TokenLogprobsArgs& args);

// grad_logits [rows, vocab] from the forward's lse and entropy and the gradients of logp and of
// entropy (either may be nullptr: zero); columns from `limit` on get 0.
struct TokenLogprobsBackwardArgs {
  const void* logits = nullptr;
  const int64_t* targets = nullptr;
  const float* inv_temperature = nullptr;
  const float* lse = nullptr;
  const float* entropy = nullptr;
  const float* grad_logp = nullptr;
  const float* grad_entropy = nullptr;
  void* grad_logits = nullptr;
  int64_t rows = 0, vocab = 0, limit = 0;
  bool bf16 = false;
  void* stream = nullptr;
};
const char* token_logprobs_backward(const TokenLogprobsBackwardArgs& args);

}  // namespace trellis::model::cuda
