// The paged-attention kernel against the composed ATen path (gather each sequence's keys, then the
// model's reference attention), on a mixed batch of prefill chunks and decodes with scattered,
// shuffled blocks.
#include "engine/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "engine/kv_cache.h"
#include "model/presets.h"

namespace trellis::engine {
namespace {

struct Case {
  torch::ScalarType dtype;
  double tol;
};

class PagedAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(PagedAttentionTest, KernelMatchesComposedOverMixedSteps) {
  const auto [dtype, tol] = GetParam();
  const int64_t H = 8, KV = 2, hd = 64, num_blocks = 64;
  torch::manual_seed(3);
  auto opts = torch::TensorOptions().dtype(dtype);
  auto kc_a = torch::zeros({num_blocks, KV, hd, kBlockSize}, opts),
       vc_a = torch::zeros({num_blocks, KV, kBlockSize, hd}, opts);
  auto kc_b = kc_a.clone(), vc_b = vc_a.clone();

  // Three sequences with blocks drawn from a shuffled pool.
  std::vector<int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(7));
  const std::vector<int64_t> prompt_lens = {37, 5, 16};
  const int64_t max_blocks = 6;
  auto tables = torch::zeros({3, max_blocks}, torch::kInt32);
  for (int64_t s = 0, next = 0; s < 3; ++s)
    for (int64_t b = 0; b < max_blocks; ++b) tables[s][b] = pool[next++];

  // Step 1: prefill chunks of every prompt (sequence 0 only its first 20 tokens).
  // Step 2: the rest of sequence 0's prompt, and one decode token for sequences 1 and 2.
  // Step 3: one decode token for each sequence.
  std::vector<int64_t> cached = {0, 0, 0};
  const std::vector<std::vector<int64_t>> steps = {{20, 5, 16}, {17, 1, 1}, {1, 1, 1}};
  for (const auto& counts : steps) {
    std::vector<int64_t> slots, positions, seqs;
    for (int64_t s = 0; s < 3; ++s) {
      for (int64_t j = cached[s]; j < cached[s] + counts[s]; ++j) {
        slots.push_back(tables[s][j / kBlockSize].item<int32_t>() * kBlockSize + j % kBlockSize);
        positions.push_back(j);
        seqs.push_back(s);
      }
      cached[s] += counts[s];
    }
    const int64_t T = static_cast<int64_t>(slots.size());
    auto q = torch::randn({T, H, hd}).to(dtype), k = torch::randn({T, KV, hd}).to(dtype),
         v = torch::randn({T, KV, hd}).to(dtype);
    PagedBatch batch{torch::tensor(slots), torch::tensor(positions), torch::tensor(seqs), tables};
    auto a = paged_attention(q, k, v, kc_a, vc_a, batch);
    auto b = composed::paged_attention(q, k, v, kc_b, vc_b, batch);
    ASSERT_EQ(a.sizes(), (std::vector<int64_t>{T, H * hd}));
    EXPECT_LT((a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().max().item<double>(), tol);
  }
  // Both paths wrote the same keys and values into the same slots.
  EXPECT_TRUE(torch::equal(kc_a, kc_b));
  EXPECT_TRUE(torch::equal(vc_a, vc_b));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PagedAttentionTest,
                         ::testing::Values(Case{torch::kFloat32, 1e-5},
                                           Case{torch::kBFloat16, 2e-2}),
                         [](const auto& info) {
                           return info.param.dtype == torch::kFloat32 ? "fp32" : "bf16";
                         });

TEST(PagedKVCache, ReferenceCountedBlocksAndCopyOnWrite) {
  auto cfg = model::preset_config(model::Arch::Llama, "tiny");
  PagedKVCache cache(cfg, 4, kBlockSize, model::Compute{torch::kCPU, torch::kFloat32});
  EXPECT_EQ(cache.free_blocks(), 4);
  int32_t a = cache.allocate();
  cache.keys(0)[a].fill_(3.0);
  cache.retain(a);  // shared by two sequences
  int32_t b = cache.copy_on_write(a);
  EXPECT_NE(a, b);
  EXPECT_EQ(cache.refs(a), 1);
  EXPECT_EQ(cache.refs(b), 1);
  EXPECT_TRUE(torch::equal(cache.keys(0)[a], cache.keys(0)[b]));
  cache.release(a);
  cache.release(b);
  EXPECT_EQ(cache.free_blocks(), 4);
  for (int i = 0; i < 4; ++i) cache.allocate();
  EXPECT_THROW(cache.allocate(), std::exception);
}

}  // namespace
}  // namespace trellis::engine
