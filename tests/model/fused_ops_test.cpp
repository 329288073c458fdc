// Fused kernels against the composed ATen versions: outputs and every input gradient, in fp32
// (tight) and bf16 (loose), on shapes that exercise GQA folding, KV offsets and odd sizes.
#include "model/fused_ops.h"

#include <gtest/gtest.h>

namespace trellis::model::fused {
namespace {

struct Case {
  torch::ScalarType dtype;
  double tol;
};
const Case kCases[] = {{torch::kFloat32, 1e-5}, {torch::kBFloat16, 3e-2}};

torch::Tensor rnd(std::vector<int64_t> shape, torch::ScalarType dtype, uint64_t seed,
                  double scale = 1.0) {
  auto gen = at::detail::createCPUGenerator(seed);
  return (at::randn(shape, gen) * scale).to(dtype).requires_grad_(true);
}

// Relative max difference, so one tolerance serves values of any magnitude.
double rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  return ((a64 - b64).abs().max() / (b64.abs().max() + 1e-12)).item<double>();
}

// Runs f on inputs through both paths with the same upstream gradient; compares all results. The
// fused path runs on `device` (the CPU's loops or the GPU's kernels), the composed one on the CPU.
template <typename Fused, typename Composed>
void compare(std::vector<torch::Tensor> inputs, Fused fused_fn, Composed composed_fn, double tol,
             const std::string& what, torch::Device device = torch::kCPU) {
  auto clone_all = [&](torch::Device to) {
    std::vector<torch::Tensor> out;
    for (auto& t : inputs)
      out.push_back(t.detach().to(to).clone().requires_grad_(t.requires_grad()));
    return out;
  };
  auto a = clone_all(device), b = clone_all(torch::kCPU);
  auto ya = fused_fn(a), yb = composed_fn(b);
  ASSERT_EQ(ya.device(), device) << what;
  ASSERT_EQ(ya.sizes(), yb.sizes()) << what;
  EXPECT_LT(rel(ya.cpu(), yb), tol) << what << " output";
  auto gen = at::detail::createCPUGenerator(99);
  auto g = at::randn(ya.sizes(), gen).to(ya.scalar_type());
  ya.backward(g.to(device));
  yb.backward(g);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    ASSERT_TRUE(a[i].grad().defined()) << what << " input " << i;
    EXPECT_EQ(a[i].grad().scalar_type(), a[i].scalar_type()) << what << " input " << i;
    EXPECT_LT(rel(a[i].grad().cpu(), b[i].grad()), tol * 3) << what << " grad of input " << i;
  }
}

// RMSNorm, SwiGLU and RoPE have kernels on the CPU and, in a build with TRELLIS_CUDA_KERNELS, on
// a GPU (model/cuda/fused_ops.h): each device's against the composed ops on the CPU.
class ElementwiseTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (device().is_cuda() && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
  torch::Device device() const { return torch::Device(GetParam()); }
};

TEST_P(ElementwiseTest, RmsNormMatchesComposed) {
  for (const auto& c : kCases) {
    // 21 rows of an odd width; 100 rows of Qwen2-0.5B's (the GPU's backward sums the weight's
    // gradient in blocks of 32 rows).
    for (auto shape : {std::vector<int64_t>{7, 3, 40}, std::vector<int64_t>{100, 896}}) {
      auto x = rnd(shape, c.dtype, 1, 3.0);
      auto w = rnd({shape.back()}, torch::kFloat32, 2);  // fp32 master weight, any compute dtype
      compare(
          {x, w}, [](auto v) { return rms_norm(v[0], v[1], 1e-6); },
          [](auto v) { return composed::rms_norm(v[0], v[1], 1e-6); }, c.tol, "rms_norm", device());
    }
  }
  // No rows (a forward asked for none of its rows' logits): nothing to normalize, a zero gradient.
  auto x = torch::zeros({0, 40}, torch::TensorOptions(device()).dtype(torch::kBFloat16));
  auto w = torch::ones({40}, torch::TensorOptions(device())).requires_grad_(true);
  auto y = rms_norm(x, w, 1e-6);
  EXPECT_EQ(y.sizes(), x.sizes());
  y.sum().backward();
  EXPECT_EQ(w.grad().abs().sum().item<float>(), 0.0f);
}

TEST_P(ElementwiseTest, SwigluMatchesComposed) {
  for (const auto& c : kCases) {
    compare(
        {rnd({33, 65}, c.dtype, 3, 4.0), rnd({33, 65}, c.dtype, 4)},
        [](auto v) { return swiglu(v[0], v[1]); },
        [](auto v) { return composed::swiglu(v[0], v[1]); }, c.tol, "swiglu", device());
  }
}

TEST_P(ElementwiseTest, RopeMatchesComposed) {
  for (const auto& c : kCases) {
    auto angles = torch::outer(torch::arange(5, 14).to(torch::kFloat32),
                               torch::rand({8}, at::detail::createCPUGenerator(5)));
    auto cos = angles.cos(), sin = angles.sin();
    for (auto shape : {std::vector<int64_t>{9, 4, 16}, std::vector<int64_t>{2, 9, 3, 16}}) {
      compare(
          {rnd(shape, c.dtype, 6), cos, sin}, [](auto v) { return rope(v[0], v[1], v[2]); },
          [](auto v) { return composed::rope(v[0], v[1], v[2]); }, c.tol, "rope", device());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ElementwiseTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

TEST(FusedOps, PackedAttentionMatchesComposed) {
  for (const auto& c : kCases) {
    // 4 samples in one stream of 25 tokens, 6 query heads on 2 kv heads. The composed path pads
    // them into one batch (longest first), into batches of two (budget for two padded 12 x 12
    // score matrices), and each into its own, whose rows must all come back in packed order.
    std::vector<int64_t> lens = {7, 1, 12, 5};
    for (int64_t budget : {composed::kPackedChunkElements, int64_t{2 * 6 * 12 * 12}, int64_t{1}}) {
      compare(
          {rnd({25, 6, 16}, c.dtype, 7), rnd({25, 2, 16}, c.dtype, 8),
           rnd({25, 2, 16}, c.dtype, 9)},
          [&](auto v) { return packed_attention(v[0], v[1], v[2], lens); },
          [&](auto v) { return composed::packed_attention(v[0], v[1], v[2], lens, budget); }, c.tol,
          "packed attention, chunk budget " + std::to_string(budget));
    }
  }
}

TEST(FusedOps, CachedAttentionMatchesComposed) {
  torch::NoGradGuard g;
  for (const auto& c : kCases) {
    // 2 sequences, 5 new queries after 4 cached keys, 4 query heads on 2 kv heads.
    auto q = rnd({2, 5, 4, 16}, c.dtype, 1), k = rnd({2, 2, 9, 16}, c.dtype, 2),
         v = rnd({2, 2, 9, 16}, c.dtype, 3);
    auto ours = cached_attention(q, k, v, 4);
    EXPECT_EQ(ours.sizes(), (std::vector<int64_t>{2, 5, 64}));
    EXPECT_LT(rel(ours, composed::cached_attention(q, k, v, 4)), c.tol);
  }
}

TEST(FusedOps, AttentionIsCausalAndConfinedToItsSample) {
  torch::NoGradGuard g;
  auto q = rnd({10, 2, 8}, torch::kFloat32, 1), k = rnd({10, 1, 8}, torch::kFloat32, 2),
       v = rnd({10, 1, 8}, torch::kFloat32, 3);
  std::vector<int64_t> lens = {6, 4};
  auto before = packed_attention(q, k, v, lens);
  // Changing token 5 (the last of sample 0) changes only its own output.
  k[5].fill_(100.0);
  v[5].fill_(-100.0);
  auto after = packed_attention(q, k, v, lens);
  EXPECT_TRUE(torch::equal(before.narrow(0, 0, 5), after.narrow(0, 0, 5)));
  EXPECT_FALSE(torch::equal(before[5], after[5]));
  EXPECT_TRUE(torch::equal(before.narrow(0, 6, 4), after.narrow(0, 6, 4)));
}

// A forward that feeds only part of a prompt samples nothing: its LM head gets 0 rows, which the
// skinny kernel must not take (it wrote past its output).
TEST(FusedOps, SkinnyLinearIsNeverChosenForZeroRows) {
  const auto w = torch::randn({64, 32}).to(torch::kBFloat16);
  EXPECT_FALSE(skinny_linear_supported(torch::empty({0, 32}, torch::kBFloat16), w));
  if (skinny_linear_supported(torch::randn({1, 32}).to(torch::kBFloat16), w)) {
    const auto x = torch::randn({3, 32}).to(torch::kBFloat16);
    EXPECT_TRUE(torch::allclose(skinny_linear(x, w).to(torch::kFloat32),
                                torch::matmul(x, w.t()).to(torch::kFloat32), 0.02, 0.05));
  }
}

}  // namespace
}  // namespace trellis::model::fused
