// Attention over the paged KV cache for one layer of a mixed batch: prefill chunks and single
// decode tokens of many sequences in one token stream. The new tokens' keys and values are written
// to their slots first, then each query attends causally to its own sequence's cached positions
// 0 .. its position, following the sequence's block table.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

namespace trellis::model {

constexpr int64_t kBlockSize = 16;  // tokens per KV block: one AVX-512 vector of fp32 scores

namespace composed {
struct Plan;
}

// One forward's batch, the same for each of its layers; read-only once built.
struct PagedBatch {
  torch::Tensor slots;         // int64 [T]: block * kBlockSize + offset receiving token t's k/v
  torch::Tensor positions;     // int64 [T]: token t sees cached positions 0 .. positions[t]
  torch::Tensor token_seq;     // int64 [T]: token t's row in block_tables
  torch::Tensor block_tables;  // int32 [S, max_blocks]: each sequence's blocks in order
  // Every token is the one new token of its sequence (a step of decodes alone). With the CUDA
  // decode kernel, the composed path then plans on the device without reading the batch back,
  // as a device graph of the step needs (model/device_graph.h).
  bool decode_only = false;
  // The composed path's indexes for this batch on the device, made by the first layer that runs
  // it and reused by the others.
  mutable std::shared_ptr<const composed::Plan> composed_plan{};
};

// q [T, heads, hd], k and v [T, kv_heads, hd] in the cache's dtype; key_cache
// [blocks, kv_heads, hd, kBlockSize], value_cache [blocks, kv_heads, kBlockSize, hd]. Returns
// [T, heads * hd]. CPU: a fused kernel; other devices, and bf16 without AVX512-BF16 or with a head
// size other than 32, 64 or 128: the composed version below.
//
// Memory layout within one (block, kv head) slab. fp32: keys [hd][B] (token innermost), values
// [B][hd]. bf16 is pair-interleaved for AVX512-BF16 dot products, which multiply adjacent bf16
// pairs: keys [hd / 2][B][2] (dims 2i and 2i+1 of a token side by side), values [B / 2][hd][2]
// (tokens 2i and 2i+1 of a dim side by side). The tensor shapes are the same for both dtypes.
torch::Tensor paged_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& key_cache,
                              const torch::Tensor& value_cache, const PagedBatch& batch);

// Whether paged_attention computes queries like q with its CPU kernel (not the composed path).
bool paged_kernel_supports(const torch::Tensor& q);

// Whether the composed path plans a decode_only batch of such queries on the device alone (the
// CUDA decode kernel serves them), as a device graph of a decode step needs.
bool paged_decode_plans_on_device(torch::Device device, torch::ScalarType dtype, int64_t head_dim);

// Causal attention over a packed stream (fused::packed_attention's contract: q [T, heads, hd],
// k, v [T, kv_heads, hd], samples of seq_lens tokens, [T, heads * hd] out) computed by the paged
// kernel over a pool of blocks holding just these samples. Each query is computed exactly as the
// engine computes the same token of the same sequence, whatever else shares either batch: the
// trainer and the validators score a rollout with the bits the engine sampled it from.
torch::Tensor paged_packed_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const std::vector<int64_t>& seq_lens);

namespace composed {
// The same from ATen ops, for any device (the tests' second code path, and the path for
// accelerators): each prefill chunk gathers its sequence's keys and runs the model's composed
// attention; the decode tokens of all sequences go through a padded, masked batch (a fixed
// number of kernels however many sequences decode). Decode tokens are sorted by length into chunks
// of at most decode_chunk_elements gathered key elements, which bounds the padded copies. In a
// build with TRELLIS_CUDA_KERNELS, the decode tokens of CUDA queries (fp32 or bf16, head size 32,
// 64 or 128) go instead through one kernel that reads the cache where it lies
// (cuda/paged_decode.h).
constexpr int64_t kDecodeChunkElements = int64_t{1} << 26;
torch::Tensor paged_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& key_cache,
                              const torch::Tensor& value_cache, const PagedBatch& batch,
                              int64_t decode_chunk_elements = kDecodeChunkElements);
}  // namespace composed

}  // namespace trellis::model
