// The batched sampler against the scalar one (engine/sampler.h, itself tested against a naive
// reference): on rows of every shape (flat, peaked, ties, masked tokens) under every kind of
// parameters, mixed in one batch, each row picks the token sample_token picks, with its log-prob,
// and u lies in that token's interval. And a bad row is an Error naming it.
#include "engine/batch_sampler.h"

#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "common/error.h"
#include "error_of.h"

namespace trellis::engine {
namespace {

using test::error_of;

torch::Tensor random_rows(int64_t rows, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  auto x = torch::empty({rows, vocab}, torch::kFloat32);
  auto* p = x.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const int kind = static_cast<int>(r % 5);
    const float scale = kind == 0 ? 0.1f : kind == 1 ? 1.0f : kind == 2 ? 8.0f : 3.0f;
    for (int64_t i = 0; i < vocab; ++i) {
      float v = scale * normal(rng);
      if (kind == 3) v = std::round(v);                                          // many exact ties
      if (kind == 4 && i % 7 == 0) v = -std::numeric_limits<float>::infinity();  // masked ids
      p[r * vocab + i] = v;
    }
  }
  return x;
}

TEST(BatchSampler, PicksWhatTheScalarSamplerPicks) {
  const std::vector<SamplingParams> kinds = {
      {0.0, 0, 1.0},  {1.0, 0, 1.0}, {0.7, 0, 1.0},  {1.3, 50, 1.0},    {1.0, 0, 0.9},
      {0.8, 20, 0.5}, {1.0, 1, 1.0}, {2.0, 0, 0.05}, {1.0, 5000, 0.99}, {0.3, 3, 0.7},
  };
  const int64_t rows = 400, vocab = 1000;
  const auto logits = random_rows(rows, vocab, 5);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<SamplingParams> params;
  std::vector<double> u;
  for (int64_t r = 0; r < rows; ++r) {
    params.push_back(kinds[(r / 5) % kinds.size()]);
    u.push_back(r % 50 == 0 ? std::nextafter(1.0, 0.0) : r % 50 == 1 ? 0.0 : uniform(rng));
  }
  const auto got = sample_batch(logits, params, u);
  ASSERT_EQ(got.size(), static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits[r].data_ptr<float>();
    const Sample want = sample_token(row, vocab, params[r], u[r]);
    EXPECT_EQ(got[r].token, want.token) << "row " << r;
    EXPECT_NEAR(got[r].logprob, want.logprob, 1e-5) << "row " << r;
    const Interval in = token_interval(row, vocab, params[r], got[r].token);
    EXPECT_TRUE(in.lo <= u[r] && u[r] < in.hi) << "row " << r;
  }
}

TEST(BatchSampler, ANarrowedVocabularyIsNeverSampledPastItsEnd) {
  auto logits = random_rows(8, 300, 2);
  logits.narrow(1, 256, 44).fill_(50);  // the padded ids would win if they were seen
  const std::vector<SamplingParams> params(8, SamplingParams{1.0, 0, 1.0});
  const auto got = sample_batch(logits.narrow(1, 0, 256), params, std::vector<double>(8, 0.999));
  for (const Sample& s : got) EXPECT_LT(s.token, 256);
}

TEST(BatchSampler, BadRowsAndArgumentsAreErrors) {
  auto logits = random_rows(3, 64, 3);
  const std::vector<SamplingParams> params(3);
  const std::vector<double> u(3, 0.5);
  logits[1][17] = std::nanf("");
  auto msg = error_of([&] { sample_batch(logits, params, u); });
  EXPECT_NE(msg.find("logit of token 17 is NaN"), std::string::npos) << msg;
  EXPECT_NE(msg.find("row 1"), std::string::npos) << msg;
  logits[1].fill_(-std::numeric_limits<float>::infinity());
  msg = error_of([&] { sample_batch(logits, params, u); });
  EXPECT_NE(msg.find("no token has a finite logit"), std::string::npos) << msg;
  logits = random_rows(3, 64, 3);
  EXPECT_NE(error_of([&] {
              sample_batch(logits, params, {0.5, 1.0, 0.5});
            }).find("u must be"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              sample_batch(logits, {{-1.0, 0, 1.0}, {}, {}}, u);
            }).find("temperature"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sample_batch(logits, params, {0.5}); }).find("3 rows"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sample_batch(logits.to(torch::kFloat64), params, u); }).find("fp32"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::engine
