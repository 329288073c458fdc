// Fused transformer ops with hand-written backward passes.
//
// Composed from ATen primitives, RMSNorm, SwiGLU, RoPE and masked softmax attention each cost a
// dozen full passes over memory (dtype casts, slices and their zero-filled backward copies, masks),
// which on a CPU costs more time than the matmuls. Each op here is one autograd node whose CPU
// kernels make one or two passes, computing in fp32 and storing in the compute dtype. In a build
// with TRELLIS_CUDA_KERNELS, RMSNorm, SwiGLU and RoPE run the same arithmetic as CUDA kernels
// (model/cuda/fused_ops.h) on a GPU; elsewhere the ops fall back to the same math in ATen ops
// (the attention on a GPU: SDPA, or the paged kernels). Numerics follow Hugging Face: RMSNorm
// normalises in fp32 and rounds to the input dtype before scaling; softmax runs in fp32.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace trellis::model::fused {

// x: [..., d] (compute dtype); weight: [d] fp32 master. Returns x's dtype.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// silu(gate) * up, elementwise; same shapes and dtype.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// x: [..., t, heads, head_dim]; cos, sin: [t, head_dim / 2] fp32. Rotates the two halves of each
// head (Hugging Face's rotate_half convention) by the angle of the token's position.
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Causal attention over a packed stream: q [T, heads, hd], k, v [T, kv_heads, hd]; samples are
// consecutive runs of seq_lens tokens and each query sees the keys of its own sample up to
// itself. Returns [T, heads * hd]. On CPU, where the paged kernel serves the dtype and head size,
// the forward is that kernel's (paged_attention.h): every query gets the bits the engine's decode
// gives the same token, so the trainer and the validators score rollouts with the engine's numbers.
torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const std::vector<int64_t>& seq_lens);

// Attention of new queries against a KV cache: q [B, t, heads, hd]; k, v [B, kv_heads, s, hd]
// (views of the cache, entries 0 .. s-1 filled). Query i sits at position q_offset + i and sees
// keys 0 .. q_offset + i. Returns [B, t, heads * hd].
torch::Tensor cached_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t q_offset);

// x @ weight.T + bias for a few rows of x (decoding a handful of sequences), no autograd: streams
// each weight row once for all rows through AVX512-BF16 dot products with fp32 accumulation, at
// 2-3x the GEMM library's speed for one or two rows (it packs the weight first). Only for what
// skinny_linear_supported() accepts: bf16 on a CPU with AVX512-BF16, 1 to 4 rows (a forward that
// feeds only part of a prompt asks the LM head for 0 rows, which the kernel cannot take).
bool skinny_linear_supported(const torch::Tensor& x, const torch::Tensor& weight);
torch::Tensor skinny_linear(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias = {});

}  // namespace trellis::model::fused

// The same ops composed from ATen primitives (autograd does the backward). Used on non-CPU
// devices, and by the tests as the second code path the fused kernels must agree with.
namespace trellis::model::fused::composed {
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// The samples go right-padded in batches, longest first, each batch's fp32 scores within
// `chunk_elements` elements (at least one sample per batch).
constexpr int64_t kPackedChunkElements = int64_t{1} << 26;
torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const std::vector<int64_t>& seq_lens,
                               int64_t chunk_elements = kPackedChunkElements);
// With PyTorch >= 2.5, scaled_dot_product_attention (flash attention on GPUs that have it).
torch::Tensor cached_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t q_offset);
}  // namespace trellis::model::fused::composed
