// PagedKVCache: the rollout engine's key/value memory, one pool of fixed-size blocks shared by all
// sequences (vLLM's PagedAttention layout), so long and short sequences share memory without
// fragmentation. A sequence owns a block table; blocks are reference-counted so that the n
// completions of one prompt share the prompt's blocks and copy a block only before writing into it.
//
// Per layer, keys are stored [block, kv_head, head_dim, block_size] (token index innermost, so a
// query's scores against one block are a vector of block_size lanes) and values
// [block, kv_head, block_size, head_dim]; bf16 pools interleave pairs within each block as
// paged_attention.h describes. The cache only allocates: paged_attention writes and reads.
//
// Placement matters on CPUs: decoding streams every cached key and value once per step, and memory
// streams fastest when a sequence's blocks are consecutive (the hardware prefetcher follows them).
// So allocate() takes the block after the caller's last one when it is free, and otherwise starts
// in the middle of the largest free run, leaving the sequence before that run room to grow. On CPU
// the pools sit on transparent huge pages where the kernel allows it (fewer TLB misses).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "model/compute.h"
#include "model/hf_config.h"
#include "model/paged_attention.h"
#include "model/transformer.h"

namespace trellis::engine {

class PagedKVCache {
 public:
  PagedKVCache(const model::HfConfig& config, int64_t num_blocks, int64_t block_size,
               const model::Compute& compute);

  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t free_blocks() const { return free_count_; }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // A fresh block with one reference; Error when none is free (callers check free_blocks()).
  // `after`: the caller's current last block (-1 for none); the block after it is preferred.
  int32_t allocate(int32_t after = -1);
  void retain(int32_t block) { ++refs_.at(block); }
  void release(int32_t block);
  int32_t refs(int32_t block) const { return refs_.at(block); }
  // A private copy of `block` (all layers), for a writer that shares it; drops one reference.
  // `after` as for allocate().
  int32_t copy_on_write(int32_t block, int32_t after = -1);

  const torch::Tensor& keys(int64_t layer) const { return k_[layer]; }
  const torch::Tensor& values(int64_t layer) const { return v_[layer]; }

 private:
  int64_t block_size_;
  std::vector<torch::Tensor> k_, v_;
  // The start of the free run that a block with no predecessor should take (see above).
  int32_t spread_start() const;

  std::vector<int32_t> refs_;  // 0 = free
  int64_t free_count_ = 0;
};

// The forward of `tokens` at batch.positions whose attention writes their keys and values into
// `cache` and reads each sequence's cached ones through `batch` (model::paged_attention).
model::ForwardOutput forward_on_cache(model::Transformer& model, PagedKVCache& cache,
                                      const torch::Tensor& tokens, const model::PagedBatch& batch,
                                      model::ForwardOptions options);

}  // namespace trellis::engine
