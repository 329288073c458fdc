// The fused elementwise kernels (fused_ops.h). RMSNorm takes one thread block per row (a block
// per 32 rows backward, which also sums the weight's gradient over them); SwiGLU and RoPE are
// grid-stride loops over elements. Arithmetic follows model/fused_ops.cpp's CPU loops term by term.
#include "model/cuda/fused_ops.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "model/cuda/common.cuh"

namespace trellis::model::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = int64_t{1} << 16;  // grid-stride loops need no more blocks than this
constexpr int64_t kRowsPerBackwardBlock = 32;
constexpr unsigned kAll = 0xffffffffu;

// The sum of v over the block, returned to every thread, in a fixed order. `scratch` holds one
// float per warp; the block's threads must all call it.
__device__ float block_sum(float v, float* scratch) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kAll, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // a previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : 0.0f;
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kAll, v, off);
  return v;
}

int64_t grid_for(int64_t n) { return std::min(kMaxGrid, (n + kThreads - 1) / kThreads); }

// ---------------------------------------------------------------- RMSNorm
template <typename T>
__global__ void __launch_bounds__(kThreads) rms_norm_forward_kernel(RmsNormArgs a) {
  __shared__ float scratch[kThreads / 32];
  const int64_t r = blockIdx.x;
  const T* x = static_cast<const T*>(a.x) + r * a.dim;
  T* y = static_cast<T*>(a.y) + r * a.dim;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < a.dim; j += blockDim.x) {
    const float v = to_float(x[j]);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float s = 1.0f / sqrtf(ss / static_cast<float>(a.dim) + a.eps);
  if (threadIdx.x == 0) a.rstd[r] = s;
  for (int64_t j = threadIdx.x; j < a.dim; j += blockDim.x) {
    y[j] = from_float<T>(rounded<T>(a.weight[j]) * rounded<T>(to_float(x[j]) * s));
  }
}

// Each thread owns the columns j = threadIdx.x (mod blockDim.x) of the block's weight-gradient
// sums in shared memory, so they need no atomics.
template <typename T>
__global__ void __launch_bounds__(kThreads) rms_norm_backward_kernel(RmsNormBackwardArgs a) {
  extern __shared__ float grad_weight[];  // [dim]
  __shared__ float scratch[kThreads / 32];
  for (int64_t j = threadIdx.x; j < a.dim; j += blockDim.x) grad_weight[j] = 0;
  const int64_t first = blockIdx.x * kRowsPerBackwardBlock;
  const int64_t last = min(a.rows, first + kRowsPerBackwardBlock);
  for (int64_t r = first; r < last; ++r) {
    const T* x = static_cast<const T*>(a.x) + r * a.dim;
    const T* gy = static_cast<const T*>(a.grad_y) + r * a.dim;
    T* gx = static_cast<T*>(a.grad_x) + r * a.dim;
    const float s = a.rstd[r];
    float dot = 0;
    for (int64_t j = threadIdx.x; j < a.dim; j += blockDim.x) {
      const float n = to_float(x[j]) * s, g = to_float(gy[j]);
      grad_weight[j] += g * n;
      dot += g * rounded<T>(a.weight[j]) * n;
    }
    dot = block_sum(dot, scratch) / static_cast<float>(a.dim);
    for (int64_t j = threadIdx.x; j < a.dim; j += blockDim.x) {
      const float g = to_float(gy[j]) * rounded<T>(a.weight[j]);
      gx[j] = from_float<T>(s * (g - to_float(x[j]) * s * dot));
    }
  }
  float* partial = a.grad_weight_partial + blockIdx.x * a.dim;
  for (int64_t j = threadIdx.x; j < a.dim; j += blockDim.x) partial[j] = grad_weight[j];
}

// ---------------------------------------------------------------- SwiGLU
template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_forward_kernel(const T* gate, const T* up, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_float(gate[i]);
    y[i] = from_float<T>(g * to_float(up[i]) / (1.0f + expf(-g)));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(const T* gate, const T* up, const T* grad_y, T* grad_gate, T* grad_up,
                           int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_float(gate[i]), u = to_float(up[i]), dy = to_float(grad_y[i]);
    const float s = 1.0f / (1.0f + expf(-g));
    grad_gate[i] = from_float<T>(dy * u * s * (1.0f + g * (1.0f - s)));
    grad_up[i] = from_float<T>(dy * g * s);
  }
}

// ---------------------------------------------------------------- RoPE
template <typename T>
__global__ void __launch_bounds__(kThreads) rope_kernel(RopeArgs a) {
  const int64_t half = a.head_dim / 2, n = a.rows * half;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / half, j = i % half;
    const int64_t angle = ((r / a.heads) % a.tokens) * half + j;
    const float c = rounded<T>(a.cos[angle]), s = a.sign * rounded<T>(a.sin[angle]);
    const T* x = static_cast<const T*>(a.x) + r * a.head_dim;
    T* out = static_cast<T*>(a.out) + r * a.head_dim;
    const float x1 = to_float(x[j]), x2 = to_float(x[j + half]);
    out[j] = from_float<T>(x1 * c - x2 * s);
    out[j + half] = from_float<T>(x2 * c + x1 * s);
  }
}

}  // namespace

const char* rms_norm_forward(const RmsNormArgs& a) {
  if (a.rows == 0) return nullptr;
  auto stream = static_cast<cudaStream_t>(a.stream);
  return launch_as(a.bf16, [&](auto tag) {
    rms_norm_forward_kernel<decltype(tag)><<<a.rows, kThreads, 0, stream>>>(a);
  });
}

int64_t rms_norm_backward_blocks(int64_t rows) {
  return (rows + kRowsPerBackwardBlock - 1) / kRowsPerBackwardBlock;
}

const char* rms_norm_backward(const RmsNormBackwardArgs& a) {
  if (a.dim > kRmsNormMaxDim) return "rms_norm_backward: row wider than kRmsNormMaxDim";
  if (a.rows == 0) return nullptr;
  auto stream = static_cast<cudaStream_t>(a.stream);
  const auto blocks = rms_norm_backward_blocks(a.rows);
  const size_t shared = a.dim * sizeof(float);
  return launch_as(a.bf16, [&](auto tag) {
    rms_norm_backward_kernel<decltype(tag)><<<blocks, kThreads, shared, stream>>>(a);
  });
}

const char* swiglu_forward(const void* gate, const void* up, void* y, int64_t n, bool bf16,
                           void* stream) {
  if (n == 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  return launch_as(bf16, [&](auto tag) {
    using T = decltype(tag);
    swiglu_forward_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(y), n);
  });
}

const char* swiglu_backward(const void* gate, const void* up, const void* grad_y, void* grad_gate,
                            void* grad_up, int64_t n, bool bf16, void* stream) {
  if (n == 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  return launch_as(bf16, [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<const T*>(grad_y),
        static_cast<T*>(grad_gate), static_cast<T*>(grad_up), n);
  });
}

const char* rope(const RopeArgs& a) {
  const int64_t n = a.rows * (a.head_dim / 2);
  if (n == 0) return nullptr;
  auto stream = static_cast<cudaStream_t>(a.stream);
  return launch_as(a.bf16, [&](auto tag) {
    rope_kernel<decltype(tag)><<<grid_for(n), kThreads, 0, stream>>>(a);
  });
}

}  // namespace trellis::model::cuda
