// The token log-prob kernels (token_logprobs.h). Forward, each thread keeps a running softmax
// state (maximum, Σ exp(z - max), Σ exp(z - max) z) over its columns; the block merges them, warp
// by warp and then across warps, in a fixed order. Backward is elementwise given the row's
// logsumexp and entropy.
#include "model/cuda/token_logprobs.h"

#include <cuda_runtime.h>

#include <cmath>

#include "model/cuda/common.cuh"

namespace trellis::model::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kAll = 0xffffffffu;

struct SoftmaxState {
  float max = -INFINITY;
  float sum = 0;       // Σ exp(z - max)
  float weighted = 0;  // Σ exp(z - max) z
};

__device__ SoftmaxState merge(SoftmaxState a, SoftmaxState b) {
  if (a.max == -INFINITY) return b;  // a state that saw no column
  if (b.max == -INFINITY) return a;
  const float m = fmaxf(a.max, b.max), ca = expf(a.max - m), cb = expf(b.max - m);
  return {m, a.sum * ca + b.sum * cb, a.weighted * ca + b.weighted * cb};
}

__device__ SoftmaxState shuffle_xor(SoftmaxState s, int offset) {
  return {__shfl_xor_sync(kAll, s.max, offset), __shfl_xor_sync(kAll, s.sum, offset),
          __shfl_xor_sync(kAll, s.weighted, offset)};
}

template <typename T>
__global__ void __launch_bounds__(kThreads) forward_kernel(TokenLogprobsArgs a) {
  __shared__ SoftmaxState warp_states[kWarps];
  const int64_t r = blockIdx.x;
  const T* x = static_cast<const T*>(a.logits) + r * a.vocab;
  const float scale = a.inv_temperature[r];
  SoftmaxState st;
  for (int64_t j = threadIdx.x; j < a.limit; j += kThreads) {
    const float z = to_float(x[j]) * scale;
    if (z > st.max) {
      const float c = expf(st.max - z);  // 0 for the first column
      st.sum = st.sum * c + 1.0f;
      st.weighted = st.weighted * c + z;
      st.max = z;
    } else {
      const float e = expf(z - st.max);
      st.sum += e;
      st.weighted += e * z;
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) st = merge(st, shuffle_xor(st, offset));
  if (threadIdx.x % 32 == 0) warp_states[threadIdx.x / 32] = st;
  __syncthreads();
  if (threadIdx.x != 0) return;
  SoftmaxState row = warp_states[0];
  for (int w = 1; w < kWarps; ++w) row = merge(row, warp_states[w]);
  const float lse = row.max + logf(row.sum);
  const int64_t target = a.targets[r];
  a.lse[r] = lse;
  a.entropy[r] = lse - row.weighted / row.sum;
  a.logp[r] = target >= 0 && target < a.limit ? to_float(x[target]) * scale - lse : NAN;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) backward_kernel(TokenLogprobsBackwardArgs a) {
  const int64_t r = blockIdx.x;
  const T* x = static_cast<const T*>(a.logits) + r * a.vocab;
  T* grad = static_cast<T*>(a.grad_logits) + r * a.vocab;
  const float scale = a.inv_temperature[r], lse = a.lse[r];
  const float g_logp = a.grad_logp ? a.grad_logp[r] : 0.0f;
  const float g_entropy = a.grad_entropy ? a.grad_entropy[r] : 0.0f;
  // d logp / dz = onehot - p and d entropy / dz = -p (z - lse + entropy), so the gradient of z is
  // g_logp onehot - p (c0 + c1 z), and the logits' is that times the scale.
  const float c0 = g_logp + g_entropy * (a.entropy[r] - lse), c1 = g_entropy;
  const int64_t target = a.targets[r];
  for (int64_t j = threadIdx.x; j < a.vocab; j += kThreads) {
    float g = 0;
    if (j < a.limit) {
      const float z = to_float(x[j]) * scale;
      g = -scale * expf(z - lse) * (c0 + c1 * z);
      if (j == target) g += scale * g_logp;
    }
    grad[j] = from_float<T>(g);
  }
}

}  // namespace

const char* token_logprobs_forward(const TokenLogprobsArgs& a) {
  if (a.rows == 0) return nullptr;
  auto stream = static_cast<cudaStream_t>(a.stream);
  return launch_as(
      a.bf16, [&](auto tag) { forward_kernel<decltype(tag)><<<a.rows, kThreads, 0, stream>>>(a); });
}

const char* token_logprobs_backward(const TokenLogprobsBackwardArgs& a) {
  if (a.rows == 0) return nullptr;
  auto stream = static_cast<cudaStream_t>(a.stream);
  return launch_as(a.bf16, [&](auto tag) {
    backward_kernel<decltype(tag)><<<a.rows, kThreads, 0, stream>>>(a);
  });
}

}  // namespace trellis::model::cuda
