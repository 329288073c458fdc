// Decode attention over the paged KV cache on an NVIDIA GPU: one CUDA kernel for every decode
// token of a step, reading each sequence's keys and values through its block table where they
// lie, instead of the composed path's gathers, masks and matmuls (about twenty kernels a layer,
// each paid in launch time: a GPU decode step was bound by them, 20-27 ms at batch 1 and 64
// alike for a 0.5B model on an H200). The shapes it reads do not depend on the sequences'
// lengths, which a CUDA graph of the decode step needs.
//
// Plain C++ on both sides (no libtorch, no CUDA headers here), so that nvcc compiles the kernel
// alone; model/paged_attention.cpp calls it when built with TRELLIS_CUDA_KERNELS.
#pragma once

#include <cstdint>

namespace trellis::model::cuda {

struct PagedDecodeArgs {
  // Queries [tokens, heads, head_dim], contiguous, in the cache's dtype (fp32 or bf16).
  const void* q = nullptr;
  // The caches in paged_attention.h's layout: per (block, kv head) slab of kBlockSize tokens,
  // fp32 keys [hd][B] and values [B][hd]; bf16 keys [hd / 2][B][2] and values [B / 2][hd][2].
  const void* key_cache = nullptr;
  const void* value_cache = nullptr;
  void* out = nullptr;                 // [tokens, heads * head_dim], the cache's dtype
  const int64_t* positions = nullptr;  // [tokens]: token t attends to positions 0 .. positions[t]
  const int64_t* sequences = nullptr;  // [tokens]: token t's row of block_tables
  const int32_t* block_tables = nullptr;  // [sequences, max_blocks]
  int64_t max_blocks = 0;
  int64_t tokens = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool bf16 = false;
  void* stream = nullptr;  // the cudaStream_t to run on (libtorch's current stream)
};

// Whether the kernel serves this head size (32, 64 or 128; the engine's blocks are 16 tokens).
bool paged_decode_serves(int64_t head_dim);

// Launches the kernel on args.stream; every pointer is device memory. Returns nullptr, or the
// CUDA error's text when the launch failed.
const char* paged_decode(const PagedDecodeArgs& args);

}  // namespace trellis::model::cuda
