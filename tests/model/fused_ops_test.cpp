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

// Runs f on inputs through both paths with the same upstream gradient; compares all results.
template <typename Fused, typename Composed>
void compare(std::vector<torch::Tensor> inputs, Fused fused_fn, Composed composed_fn, double tol,
             const std::string& what) {
  auto clone_all = [&] {
    std::vector<torch::Tensor> out;
    for (auto& t : inputs) out.push_back(t.detach().clone().requires_grad_(t.requires_grad()));
    return out;
  };
  auto a = clone_all(), b = clone_all();
  auto ya = fused_fn(a), yb = composed_fn(b);
  ASSERT_EQ(ya.sizes(), yb.sizes()) << what;
  EXPECT_LT(rel(ya, yb), tol) << what << " output";
  auto gen = at::detail::createCPUGenerator(99);
  auto g = at::randn(ya.sizes(), gen).to(ya.scalar_type());
  ya.backward(g);
  yb.backward(g);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    ASSERT_TRUE(a[i].grad().defined()) << what << " input " << i;
    EXPECT_EQ(a[i].grad().scalar_type(), a[i].scalar_type()) << what << " input " << i;
    EXPECT_LT(rel(a[i].grad(), b[i].grad()), tol * 3) << what << " grad of input " << i;
  }
}

TEST(FusedOps, RmsNormMatchesComposed) {
  for (const auto& c : kCases) {
    auto x = rnd({7, 3, 40}, c.dtype, 1, 3.0);
    auto w = rnd({40}, torch::kFloat32, 2);  // fp32 master weight, any compute dtype
    compare({x, w}, [](auto v) { return rms_norm(v[0], v[1], 1e-6); },
            [](auto v) { return composed::rms_norm(v[0], v[1], 1e-6); }, c.tol, "rms_norm");
  }
}

TEST(FusedOps, SwigluMatchesComposed) {
  for (const auto& c : kCases) {
    compare({rnd({33, 65}, c.dtype, 3, 4.0), rnd({33, 65}, c.dtype, 4)},
            [](auto v) { return swiglu(v[0], v[1]); },
            [](auto v) { return composed::swiglu(v[0], v[1]); }, c.tol, "swiglu");
  }
}

TEST(FusedOps, RopeMatchesComposed) {
  for (const auto& c : kCases) {
    auto angles = torch::outer(torch::arange(5, 14).to(torch::kFloat32),
                               torch::rand({8}, at::detail::createCPUGenerator(5)));
    auto cos = angles.cos(), sin = angles.sin();
    for (auto shape : {std::vector<int64_t>{9, 4, 16}, std::vector<int64_t>{2, 9, 3, 16}}) {
      compare({rnd(shape, c.dtype, 6), cos, sin}, [](auto v) { return rope(v[0], v[1], v[2]); },
              [](auto v) { return composed::rope(v[0], v[1], v[2]); }, c.tol, "rope");
    }
  }
}

TEST(FusedOps, CausalAttentionMatchesComposed) {
  for (const auto& c : kCases) {
    // n=2 sequences, 3 kv heads, group 2, t=5 new queries after 4 cached keys (s = 9).
    const int64_t t = 5, offset = 4, s = 9;
    compare({rnd({2, 3, 2 * t, 16}, c.dtype, 7), rnd({2, 3, s, 16}, c.dtype, 8),
             rnd({2, 3, s, 16}, c.dtype, 9)},
            [&](auto v) { return causal_attention(v[0], v[1], v[2], t, offset); },
            [&](auto v) { return composed::causal_attention(v[0], v[1], v[2], t, offset); },
            c.tol, "attention with offset");
    // Training shape: no cache, queries == keys.
    compare({rnd({1, 2, 3 * 11, 8}, c.dtype, 10), rnd({1, 2, 11, 8}, c.dtype, 11),
             rnd({1, 2, 11, 8}, c.dtype, 12)},
            [&](auto v) { return causal_attention(v[0], v[1], v[2], 11, 0); },
            [&](auto v) { return composed::causal_attention(v[0], v[1], v[2], 11, 0); }, c.tol,
            "attention");
  }
}

TEST(FusedOps, AttentionIsCausal) {
  // Changing a future key or value must not change earlier outputs.
  torch::NoGradGuard g;
  auto q = rnd({1, 1, 6, 8}, torch::kFloat32, 1), k = rnd({1, 1, 6, 8}, torch::kFloat32, 2),
       v = rnd({1, 1, 6, 8}, torch::kFloat32, 3);
  auto before = causal_attention(q, k, v, 6, 0);
  k[0][0][5].fill_(100.0);
  v[0][0][5].fill_(-100.0);
  auto after = causal_attention(q, k, v, 6, 0);
  EXPECT_TRUE(torch::equal(before.narrow(2, 0, 5), after.narrow(2, 0, 5)));
  EXPECT_FALSE(torch::equal(before.narrow(2, 5, 1), after.narrow(2, 5, 1)));
}

}  // namespace
}  // namespace trellis::model::fused
