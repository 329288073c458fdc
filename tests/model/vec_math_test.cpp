// The vectorised double exp of the sampler's weights (model/vec_math.h) against std::exp.
#include "model/vec_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace trellis::model::vec {
namespace {

TEST(VecMath, ExpWeightsMatchStdExp) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> spread(-800.0f, 0.0f), near(-1.0f, 0.0f);
  std::vector<float> x;
  for (int i = 0; i < 20000; ++i) x.push_back(i % 2 ? spread(rng) : near(rng));
  for (float v : {0.0f, -1e-30f, -0.5f, -0.34657359f, -0.34657360f, -707.9f, -708.0f, -708.5f,
                  -745.0f, -1e6f})
    x.push_back(v);
  const double shift = 0.25, divisor = 0.7;  // a max logit of 0.25 at temperature 0.7
  for (float& v : x) v += static_cast<float>(shift);
  std::vector<double> got(x.size());
  exp_weights(x.data(), static_cast<int64_t>(x.size()), shift, divisor, got.data());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = (static_cast<double>(x[i]) - shift) / divisor;
    const double want = std::exp(a);
    if (a < -708.0) {
      EXPECT_EQ(got[i], 0.0) << "a = " << a;  // std::exp is subnormal there, or 0
      continue;
    }
    worst = std::max(worst, std::abs(got[i] - want) / want);
  }
  EXPECT_LT(worst, 5e-16) << "worst relative error";  // about 2 ulp
  double one = 0;
  const float at_max = static_cast<float>(shift);
  exp_weights(&at_max, 1, shift, divisor, &one);
  EXPECT_EQ(one, 1.0);  // the most likely token weighs exactly 1
}

TEST(VecMath, ExpWeightsOfMaskedAndNaNLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-inf, std::nanf(""), 1.0f};
  std::vector<double> got(3);
  exp_weights(x.data(), 3, 1.0, 1.0, got.data());
  EXPECT_EQ(got[0], 0.0);
  EXPECT_TRUE(std::isnan(got[1]));
  EXPECT_EQ(got[2], 1.0);
}

}  // namespace
}  // namespace trellis::model::vec
