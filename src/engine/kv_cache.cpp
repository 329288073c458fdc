#include "engine/kv_cache.h"

#include "common/error.h"

namespace trellis::engine {

PagedKVCache::PagedKVCache(const model::HfConfig& config, int64_t num_blocks, int64_t block_size,
                           const model::Compute& compute)
    : block_size_(block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    throw Error(
        fmt::format("KV cache needs blocks: got {} blocks of {} tokens", num_blocks, block_size));
  }
  auto opts = torch::TensorOptions().dtype(compute.dtype).device(compute.device);
  const int64_t kv = config.num_key_value_heads, hd = config.head_dim;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    // Uninitialised: pages are committed as blocks are first written. Lanes past a sequence's
    // length are never read into results.
    k_.push_back(torch::empty({num_blocks, kv, hd, block_size}, opts));
    v_.push_back(torch::empty({num_blocks, kv, block_size, hd}, opts));
  }
  refs_.assign(num_blocks, 0);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t PagedKVCache::allocate() {
  if (free_.empty()) throw Error("KV cache: no free block");
  int32_t b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void PagedKVCache::release(int32_t block) {
  if (--refs_.at(block) == 0) free_.push_back(block);
}

int32_t PagedKVCache::copy_on_write(int32_t block) {
  int32_t copy = allocate();
  for (size_t i = 0; i < k_.size(); ++i) {
    k_[i][copy].copy_(k_[i][block]);
    v_[i][copy].copy_(v_[i][block]);
  }
  release(block);
  return copy;
}

}  // namespace trellis::engine
