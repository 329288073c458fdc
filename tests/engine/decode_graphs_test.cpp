// DecodeGraphs (engine/decode_graphs.h) against the op-by-op forward it replaces: padded decode
// steps from fixed buffers give the same logits and hidden rows, padding never reaches a
// sequence's keys and values (the steps after it would differ), weights changed in place reach
// the replays, and graphs are recorded again exactly when they must be. On the CPU a "graph" runs
// its work at each replay; on a GPU, in a build with TRELLIS_CUDA_KERNELS, they are CUDA graphs
// and the same cases check those.
#include "engine/decode_graphs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "model/paged_attention.h"
#include "model/presets.h"

namespace trellis::engine {
namespace {

using model::kBlockSize;

struct Case {
  const char* device;
  torch::ScalarType dtype;
  double tol;  // on logits, between the two paths
};

class DecodeGraphsTest : public ::testing::TestWithParam<Case> {};

// Sequences whose blocks are fixed by hand (sequence s owns blocks s * kSpan ..), so that two
// caches hold them in the same places; the caches' last block stays free for the padding.
constexpr int64_t kSpan = 80, kSequences = 5, kNumBlocks = kSequences * kSpan + 1;

struct Sequences {
  std::vector<int64_t> lengths;  // tokens cached

  int64_t slot(int64_t s, int64_t j) const {
    return (s * kSpan + j / kBlockSize) * kBlockSize + j % kBlockSize;
  }
  // Block tables of `seqs`, as wide as the longest needs after `extra` more tokens.
  torch::Tensor tables(const std::vector<int64_t>& seqs, int64_t extra) const {
    int64_t width = 1;
    for (int64_t s : seqs)
      width = std::max(width, (lengths[s] + extra + kBlockSize - 1) / kBlockSize);
    auto t = torch::zeros({static_cast<int64_t>(seqs.size()), width}, torch::kInt32);
    for (size_t i = 0; i < seqs.size(); ++i)
      for (int64_t b = 0; b < width; ++b) t[i][b] = static_cast<int32_t>(seqs[i] * kSpan + b);
    return t;
  }
};

// Feeds `count` tokens of sequence s after its cached ones, op by op, into `cache`.
model::ForwardOutput prefill(model::Transformer& m, PagedKVCache& cache, const Sequences& seqs,
                             int64_t s, int64_t count) {
  std::vector<int64_t> tokens, positions, slots, rows;
  for (int64_t j = seqs.lengths[s]; j < seqs.lengths[s] + count; ++j) {
    tokens.push_back((j * 31 + s * 7) % 200);
    positions.push_back(j);
    slots.push_back(seqs.slot(s, j));
    rows.push_back(0);
  }
  const model::PagedBatch batch{torch::tensor(slots), torch::tensor(positions), torch::tensor(rows),
                                seqs.tables({s}, count)};
  return forward_on_cache(m, cache, torch::tensor(tokens), batch, {.logits = true, .hidden = true});
}

struct Step {
  torch::Tensor tokens, positions, slots, tables;
};

// One new token for each of `active`, at its next position.
Step decode_step(const Sequences& seqs, const std::vector<int64_t>& active, int64_t salt) {
  std::vector<int64_t> tokens, positions, slots;
  for (int64_t s : active) {
    const int64_t j = seqs.lengths[s];
    tokens.push_back((j * 13 + s * 5 + salt) % 200);
    positions.push_back(j);
    slots.push_back(seqs.slot(s, j));
  }
  return {torch::tensor(tokens), torch::tensor(positions), torch::tensor(slots),
          seqs.tables(active, 1)};
}

model::ForwardOutput op_by_op(model::Transformer& m, PagedKVCache& cache, const Step& st) {
  const int64_t T = st.tokens.numel();
  const model::PagedBatch batch{st.slots, st.positions, torch::arange(T), st.tables};
  return forward_on_cache(m, cache, st.tokens, batch, {.logits = true, .hidden = true});
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.cpu().to(torch::kFloat32) - b.cpu().to(torch::kFloat32)).abs().max().item<double>();
}

TEST_P(DecodeGraphsTest, StepsMatchTheOpByOpForwardAndRecordOnlyWhenTheyMust) {
  const auto [device_name, dtype, tol] = GetParam();
  const torch::Device device(device_name);
  if (device.is_cuda() && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  auto cfg = model::preset_config(model::Arch::Qwen3, "tiny");
  model::Transformer m(cfg, {device, dtype});
  m.init_random(3);
  if (device.is_cuda() && !DecodeGraphs::available(m)) {
    GTEST_SKIP() << "no decode graphs in this build (TRELLIS_CUDA_KERNELS)";
  }
  PagedKVCache with_graphs(cfg, kNumBlocks, kBlockSize, m.compute());
  PagedKVCache plain(cfg, kNumBlocks, kBlockSize, m.compute());
  auto graphs = std::make_unique<DecodeGraphs>(m, with_graphs, /*max_tokens=*/8);
  EXPECT_EQ(with_graphs.free_blocks(), kNumBlocks - 1) << "one block for the padding";

  Sequences seqs{std::vector<int64_t>(kSequences, 0)};
  const std::vector<int64_t> prompts{3, 17, 30, 1, 9};
  for (int64_t s = 0; s < kSequences; ++s) {
    prefill(m, with_graphs, seqs, s, prompts[s]);
    prefill(m, plain, seqs, s, prompts[s]);
    seqs.lengths[s] = prompts[s];
  }
  int64_t salt = 0;
  // A step through both paths; the sequences advance.
  auto both = [&](const std::vector<int64_t>& active, const std::string& what) {
    const Step st = decode_step(seqs, active, ++salt);
    const auto want = op_by_op(m, plain, st);
    const auto got = graphs->run(st.tokens, st.positions, st.slots, st.tables);
    ASSERT_EQ(got.logits.sizes(), want.logits.sizes()) << what;
    EXPECT_LT(max_diff(got.logits, want.logits), tol) << what;
    EXPECT_LT(max_diff(got.hidden, want.hidden), tol) << what;
    for (int64_t s : active) ++seqs.lengths[s];
  };

  const std::vector<int64_t> all{0, 1, 2, 3, 4}, one{2};
  for (int i = 0; i < 3; ++i) both(all, "5 tokens, padded to 6, step " + std::to_string(i));
  EXPECT_EQ(graphs->recordings(), 1);
  both(one, "1 token");
  both(all, "5 tokens again");
  EXPECT_EQ(graphs->recordings(), 2) << "one graph per batch size";

  // New weights in place (as a trainer's optimizer step or a weight swap writes them): replays
  // compute with them, without recording again.
  for (const auto& [name, p] : m.named_parameters())
    p.mul_(name.find("norm") != std::string::npos ? 1.0 : 1.1);
  both(all, "after new weights");
  EXPECT_EQ(graphs->recordings(), 2);

  // The weight copies dropped (the model's buffers moved): recorded again.
  m.set_requires_grad(false);
  both(all, "after the weight copies moved");
  EXPECT_EQ(graphs->recordings(), 3);

  // A sequence past 64 blocks outgrows the tables' first width: recorded again, at twice it.
  prefill(m, with_graphs, seqs, 3, 1030);
  prefill(m, plain, seqs, 3, 1030);
  seqs.lengths[3] += 1030;
  both(all, "a sequence of 1,040 tokens");
  EXPECT_EQ(graphs->recordings(), 4);
  both(all, "the long sequence again");
  EXPECT_EQ(graphs->recordings(), 4);

  graphs.reset();
  EXPECT_EQ(with_graphs.free_blocks(), kNumBlocks) << "the padding block is returned";
}

INSTANTIATE_TEST_SUITE_P(Devices, DecodeGraphsTest,
                         ::testing::Values(Case{"cpu", torch::kFloat32, 1e-4},
                                           Case{"cuda", torch::kFloat32, 1e-4},
                                           Case{"cuda", torch::kBFloat16, 5e-2}),
                         [](const auto& info) {
                           return std::string(info.param.device) +
                                  (info.param.dtype == torch::kFloat32 ? "_fp32" : "_bf16");
                         });

}  // namespace
}  // namespace trellis::engine
