// The paged decode kernel (paged_decode.h). One thread block per (token, query head): its warps
// take the sequence's key blocks in turn, each keeping a running softmax (maximum, sum and
// weighted values) over the blocks it saw, and the block combines the warps' states at the end,
// the flash-decoding rule. Scores, softmax and sums are fp32 whatever the cache's dtype.
#include "model/cuda/paged_decode.h"

#include <cuda_runtime.h>

#include <cmath>

#include "model/cuda/common.cuh"

namespace trellis::model::cuda {
namespace {

constexpr int kBlock = 16;  // tokens per KV block: model::kBlockSize
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr unsigned kAll = 0xffffffffu;

// q . key of the slab's token o over the dims [d0, d0 + HD / 2). fp32 keys are [hd][B]; bf16 keys
// [hd / 2][B][2], so dims 2i and 2i + 1 of a token are one 32-bit word.
template <int HD>
__device__ float half_dot(const float* q, const float* keys, int o, int d0) {
  float s = 0;
#pragma unroll
  for (int j = 0; j < HD / 2; ++j) s += q[d0 + j] * keys[(d0 + j) * kBlock + o];
  return s;
}
template <int HD>
__device__ float half_dot(const float* q, const __nv_bfloat16* keys, int o, int d0) {
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(keys);
  float s = 0;
#pragma unroll
  for (int j = 0; j < HD / 4; ++j) {
    const int i = d0 / 2 + j;
    const float2 k = __bfloat1622float2(pairs[i * kBlock + o]);
    s += q[2 * i] * k.x + q[2 * i + 1] * k.y;
  }
  return s;
}

// Dim d of the slab's token o. fp32 values are [B][hd]; bf16 values [B / 2][hd][2].
template <int HD>
__device__ float value_at(const float* values, int o, int d) {
  return values[o * HD + d];
}
template <int HD>
__device__ float value_at(const __nv_bfloat16* values, int o, int d) {
  return __bfloat162float(values[((o / 2) * HD + d) * 2 + (o & 1)]);
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) paged_decode_kernel(PagedDecodeArgs a) {
  static_assert(HD % 32 == 0 && HD <= 128, "head sizes 32, 64 and 128");
  constexpr int kDims = HD / 32;  // the value dims each lane sums: lane, lane + 32, ...
  __shared__ float q[HD];
  __shared__ float warp_max[kWarps], warp_sum[kWarps];
  __shared__ float warp_out[kWarps][HD];

  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const int kv = h / static_cast<int>(a.heads / a.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* qt = static_cast<const T*>(a.q) + (t * a.heads + h) * HD;
  for (int d = threadIdx.x; d < HD; d += kThreads) q[d] = to_float(qt[d]);
  __syncthreads();

  const int64_t position = a.positions[t];
  const int32_t* table = a.block_tables + a.sequences[t] * a.max_blocks;
  const int64_t blocks = position / kBlock + 1;
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  // Lanes 2o and 2o + 1 score the block's token o, each over half the dims.
  const int o = lane / 2, d0 = (lane % 2) * (HD / 2);

  float running_max = -INFINITY, running_sum = 0;
  float acc[kDims];
#pragma unroll
  for (int k = 0; k < kDims; ++k) acc[k] = 0;

  for (int64_t j = warp; j < blocks; j += kWarps) {
    const int64_t slab = (static_cast<int64_t>(table[j]) * a.kv_heads + kv) * kBlock * HD;
    const T* keys = static_cast<const T*>(a.key_cache) + slab;
    const T* values = static_cast<const T*>(a.value_cache) + slab;
    // Tokens past the position are stale or never written (NaN, say): never read into a sum.
    const int valid =
        static_cast<int>(min(static_cast<int64_t>(kBlock), position + 1 - j * kBlock));
    float s = half_dot<HD>(q, keys, o, d0);
    s += __shfl_xor_sync(kAll, s, 1);
    s = o < valid ? s * scale : -INFINITY;
    float block_max = s;
    for (int off = 16; off > 0; off /= 2)
      block_max = fmaxf(block_max, __shfl_xor_sync(kAll, block_max, off));
    const float new_max = fmaxf(running_max, block_max);
    const float e = o < valid ? expf(s - new_max) : 0.0f;
    float block_sum = lane % 2 == 0 ? e : 0.0f;
    for (int off = 16; off > 0; off /= 2) block_sum += __shfl_xor_sync(kAll, block_sum, off);
    const float correction = expf(running_max - new_max);  // 0 on the warp's first block
    running_sum = running_sum * correction + block_sum;
#pragma unroll
    for (int k = 0; k < kDims; ++k) acc[k] *= correction;
    for (int i = 0; i < valid; ++i) {  // `valid` is the same for the whole warp
      const float w = __shfl_sync(kAll, e, 2 * i);
#pragma unroll
      for (int k = 0; k < kDims; ++k) acc[k] += w * value_at<HD>(values, i, lane + 32 * k);
    }
    running_max = new_max;
  }

  if (lane == 0) {
    warp_max[warp] = running_max;
    warp_sum[warp] = running_sum;
  }
#pragma unroll
  for (int k = 0; k < kDims; ++k) warp_out[warp][lane + 32 * k] = acc[k];
  __syncthreads();
  // Position 0 is always there, so some warp saw a block and the maximum is finite; a warp that
  // saw none weighs exp(-inf) = 0.
  float m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, warp_max[w]);
  float sum = 0;
  for (int w = 0; w < kWarps; ++w) sum += warp_sum[w] * expf(warp_max[w] - m);
  T* out = static_cast<T*>(a.out) + (t * a.heads + h) * HD;
  for (int d = threadIdx.x; d < HD; d += kThreads) {
    float x = 0;
    for (int w = 0; w < kWarps; ++w) x += warp_out[w][d] * expf(warp_max[w] - m);
    out[d] = from_float<T>(x / sum);
  }
}

template <typename T>
void launch(const PagedDecodeArgs& a) {
  const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>(a.heads));
  auto stream = static_cast<cudaStream_t>(a.stream);
  switch (a.head_dim) {
    case 32:
      paged_decode_kernel<T, 32><<<grid, kThreads, 0, stream>>>(a);
      break;
    case 64:
      paged_decode_kernel<T, 64><<<grid, kThreads, 0, stream>>>(a);
      break;
    default:
      paged_decode_kernel<T, 128><<<grid, kThreads, 0, stream>>>(a);
      break;
  }
}

}  // namespace

bool paged_decode_serves(int64_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128;
}

const char* paged_decode(const PagedDecodeArgs& a) {
  if (!paged_decode_serves(a.head_dim)) return "paged_decode: head size not served";
  if (a.tokens == 0) return nullptr;
  return launch_as(a.bf16, [&](auto tag) { launch<decltype(tag)>(a); });
}

}  // namespace trellis::model::cuda
