// The fused token log-probs (CPU loops; CUDA kernels in a build with them) against an independent
// fp64 computation from ATen ops: values, and the logits' gradient for a loss that weighs both
// outputs, through temperatures, a vocabulary limit, bf16 logits and a 152k vocabulary.
#include "model/token_logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace trellis::model {
namespace {

class TokenLogprobsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (device().is_cuda() && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
  torch::Device device() const { return torch::Device(GetParam()); }
};

struct Reference {
  torch::Tensor logp, entropy, grad;  // fp64, on the CPU
};

// log softmax(logits[:, :limit] * inv_t) in fp64 and the gradient of Σ a logp + b entropy.
Reference reference(const torch::Tensor& logits, const torch::Tensor& targets,
                    const torch::Tensor& inv_t, int64_t limit, const torch::Tensor& a,
                    const torch::Tensor& b) {
  auto x = logits.detach().cpu().to(torch::kFloat64).requires_grad_(true);
  auto z = x.narrow(1, 0, limit) * inv_t.to(torch::kFloat64).reshape({-1, 1});
  auto logsm = torch::log_softmax(z, 1);
  auto logp = logsm.gather(1, targets.reshape({-1, 1})).squeeze(1);
  auto entropy = -(logsm.exp() * logsm).sum(1);
  (logp * a.to(torch::kFloat64) + entropy * b.to(torch::kFloat64)).sum().backward();
  return {logp.detach(), entropy.detach(), x.grad()};
}

double max_rel(const torch::Tensor& got, const torch::Tensor& want) {
  auto g = got.detach().cpu().to(torch::kFloat64);
  return ((g - want).abs().max() / (want.abs().max() + 1e-30)).item<double>();
}

struct Case {
  int64_t rows, vocab, limit;  // limit 0: the whole vocabulary
  torch::ScalarType dtype;
  double value_tol, grad_tol;
  bool entropy_grad;  // whether the loss uses the entropy (else its gradient stays undefined)
};

TEST_P(TokenLogprobsTest, MatchFp64ReferenceValuesAndGradients) {
  const Case cases[] = {
      {7, 1000, 0, torch::kFloat32, 1e-5, 1e-5, true},
      {7, 1000, 900, torch::kFloat32, 1e-5, 1e-5, true},
      {5, 777, 0, torch::kFloat32, 1e-5, 1e-5, false},
      // bf16 logits are exact in fp64; their gradient is rounded to bf16.
      {6, 1000, 0, torch::kBFloat16, 1e-5, 1e-2, true},
      {3, 151936, 0, torch::kFloat32, 1e-5, 1e-5, true},  // Qwen's vocabulary
      {3, 151936, 151646, torch::kBFloat16, 1e-5, 1e-2, true},
  };
  for (const auto& c : cases) {
    const std::string what = std::to_string(c.rows) + "x" + std::to_string(c.vocab) + " limit " +
                             std::to_string(c.limit) + (c.dtype == torch::kBFloat16 ? " bf16" : "");
    const int64_t limit = c.limit > 0 ? c.limit : c.vocab;
    auto gen = at::detail::createCPUGenerator(7 + c.rows);
    auto logits = (at::randn({c.rows, c.vocab}, gen) * 4).to(c.dtype);
    auto targets = at::randint(0, limit, {c.rows}, gen, torch::kInt64);
    // Temperatures 0.5 .. 1.7 (1 / T is what the trainer passes).
    auto inv_t = (1.0 / (0.5 + at::rand({c.rows, 1}, gen) * 1.2)).to(torch::kFloat32);
    auto a = at::randn({c.rows}, gen);
    auto b = c.entropy_grad ? at::randn({c.rows}, gen) : torch::zeros({c.rows});
    const auto want = reference(logits, targets, inv_t, limit, a, b);

    auto x = logits.to(device()).requires_grad_(true);
    const auto got = token_logprobs(x, targets.to(device()), inv_t.to(device()), c.limit);
    ASSERT_EQ(got.logp.scalar_type(), torch::kFloat32) << what;
    EXPECT_LT(max_rel(got.logp, want.logp), c.value_tol) << what << " logp";
    EXPECT_LT(max_rel(got.entropy, want.entropy), c.value_tol) << what << " entropy";
    auto loss = (got.logp * a.to(device())).sum();
    if (c.entropy_grad) loss = loss + (got.entropy * b.to(device())).sum();
    loss.backward();
    ASSERT_EQ(x.grad().scalar_type(), c.dtype) << what;
    EXPECT_LT(max_rel(x.grad(), want.grad), c.grad_tol) << what << " gradient";
    if (limit < c.vocab) {
      EXPECT_EQ(x.grad().narrow(1, limit, c.vocab - limit).abs().max().item<float>(), 0.0f)
          << what << ": columns past the limit";
    }
  }
}

TEST_P(TokenLogprobsTest, AgreesWithTheComposedPath) {
  auto gen = at::detail::createCPUGenerator(3);
  auto logits = (at::randn({4, 300}, gen) * 3).to(device());
  auto targets = at::randint(0, 250, {4}, gen, torch::kInt64).to(device());
  auto inv_t = torch::full({4, 1}, 1.0f / 0.7f).to(device());
  const auto fused = token_logprobs(logits, targets, inv_t, 250);
  const auto plain = composed::token_logprobs(logits, targets, inv_t, 250);
  EXPECT_TRUE(torch::allclose(fused.logp, plain.logp, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(fused.entropy, plain.entropy, 1e-5, 1e-5));
}

TEST_P(TokenLogprobsTest, NoRowsAndTargetsOutsideTheSoftmax) {
  auto none = token_logprobs(torch::zeros({0, 50}, torch::TensorOptions(device())),
                             torch::zeros({0}, torch::kInt64), torch::ones({0}), 0);
  EXPECT_EQ(none.logp.numel(), 0);

  // Token 45 is past a 40-token softmax (a hostile or corrupt rollout): never a read out of range.
  auto logits = torch::zeros({2, 50}, torch::TensorOptions(device()));
  auto targets = torch::tensor({3, 45}, torch::kInt64);
  if (device().is_cpu()) {
    try {
      token_logprobs(logits, targets, torch::ones({2}), 40);
      FAIL() << "a target past the limit was scored";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("outside the softmax's 40 ids"), std::string::npos)
          << e.what();
    }
  } else {
    const auto got = token_logprobs(logits, targets, torch::ones({2}), 40).logp.cpu();
    EXPECT_NEAR(got[0].item<float>(), -std::log(40.0f), 1e-5);
    EXPECT_TRUE(std::isnan(got[1].item<float>()));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, TokenLogprobsTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace trellis::model
