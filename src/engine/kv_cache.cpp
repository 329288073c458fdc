#include "engine/kv_cache.h"

#include <sys/mman.h>

#include <cstdlib>

#include "common/error.h"

namespace trellis::engine {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Uninitialised CPU memory on 2 MiB-aligned transparent huge pages when the kernel grants them
// (THP "madvise" mode is common); ordinary pages otherwise. Pages are committed as first written.
torch::Tensor huge_page_tensor(const std::vector<int64_t>& shape, torch::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t bytes = static_cast<size_t>(numel) * torch::elementSize(dtype);
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) {
    throw Error(fmt::format("cannot allocate {:.1f} MiB for the KV cache (lower engine memory)",
                            static_cast<double>(bytes) / (1 << 20)));
  }
  ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
  return torch::from_blob(
      p, shape, [](void* q) { std::free(q); }, torch::dtype(dtype));
}

}  // namespace

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
    // Uninitialised: lanes past a sequence's length are never read into results.
    const std::vector<int64_t> kshape{num_blocks, kv, hd, block_size};
    const std::vector<int64_t> vshape{num_blocks, kv, block_size, hd};
    if (compute.device.is_cpu()) {
      k_.push_back(huge_page_tensor(kshape, compute.dtype));
      v_.push_back(huge_page_tensor(vshape, compute.dtype));
    } else {
      k_.push_back(torch::empty(kshape, opts));
      v_.push_back(torch::empty(vshape, opts));
    }
  }
  refs_.assign(num_blocks, 0);
  free_count_ = num_blocks;
}

int32_t PagedKVCache::spread_start() const {
  const auto n = static_cast<int32_t>(refs_.size());
  int32_t best_start = -1, best_len = 0;
  for (int32_t i = 0; i < n;) {
    if (refs_[i] != 0) {
      ++i;
      continue;
    }
    int32_t j = i;
    while (j < n && refs_[j] == 0) ++j;
    if (j - i > best_len) {
      best_start = i;
      best_len = j - i;
    }
    i = j;
  }
  // A run that follows a used block is split in half: its first half stays for that block's
  // owner to grow into. A run at the start of the pool has no such owner.
  return best_start == 0 ? 0 : best_start + best_len / 2;
}

int32_t PagedKVCache::allocate(int32_t after) {
  if (free_count_ == 0) throw Error("KV cache: no free block");
  const auto n = static_cast<int32_t>(refs_.size());
  int32_t b = after >= 0 && after + 1 < n && refs_[after + 1] == 0 ? after + 1 : spread_start();
  refs_[b] = 1;
  --free_count_;
  return b;
}

void PagedKVCache::release(int32_t block) {
  if (refs_.at(block) <= 0) throw Error(fmt::format("KV cache: block {} released twice", block));
  if (--refs_[block] == 0) ++free_count_;
}

int32_t PagedKVCache::copy_on_write(int32_t block, int32_t after) {
  int32_t copy = allocate(after);
  for (size_t i = 0; i < k_.size(); ++i) {
    k_[i][copy].copy_(k_[i][block]);
    v_[i][copy].copy_(v_[i][block]);
  }
  release(block);
  return copy;
}

model::ForwardOutput forward_on_cache(model::Transformer& model, PagedKVCache& cache,
                                      const torch::Tensor& tokens, const model::PagedBatch& batch,
                                      model::ForwardOptions options) {
  return model.forward_tokens(
      tokens, batch.positions,
      [&](int64_t layer, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        return model::paged_attention(q, k, v, cache.keys(layer), cache.values(layer), batch);
      },
      std::move(options));
}

}  // namespace trellis::engine
