// pass@k against the binomial formula computed directly, and its edge cases.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "env/pass_at_k.h"

namespace trellis::env {
namespace {

// C(n, k) exactly in long double (small n only).
long double binomial(int64_t n, int64_t k) {
  if (k < 0 || k > n) return 0;
  long double r = 1;
  for (int64_t i = 1; i <= k; ++i) r = r * (n - k + i) / i;
  return r;
}

TEST(PassAtK, MatchesTheBinomialFormula) {
  for (int64_t n = 1; n <= 20; ++n) {
    for (int64_t c = 0; c <= n; ++c) {
      for (int64_t k = 1; k <= n; ++k) {
        const long double expected = 1.0L - binomial(n - c, k) / binomial(n, k);
        EXPECT_NEAR(pass_at_k(n, c, k), static_cast<double>(expected), 1e-12)
            << "n=" << n << " c=" << c << " k=" << k;
      }
    }
  }
}

TEST(PassAtK, KnownValues) {
  EXPECT_DOUBLE_EQ(pass_at_k(8, 2, 1), 0.25);  // pass@1 is the fraction passing
  EXPECT_DOUBLE_EQ(pass_at_k(8, 0, 8), 0.0);
  EXPECT_DOUBLE_EQ(pass_at_k(8, 1, 8), 1.0);
  EXPECT_NEAR(pass_at_k(4, 1, 2), 0.5, 1e-15);  // 1 - C(3,2)/C(4,2) = 1 - 3/6
  EXPECT_NEAR(pass_at_k(100000, 3, 10), 1 - std::pow(1 - 10.0 / 100000, 3), 1e-6);
  EXPECT_THROW(pass_at_k(4, 5, 1), Error);
  EXPECT_THROW(pass_at_k(4, 1, 5), Error);
  EXPECT_THROW(pass_at_k(0, 0, 1), Error);
}

}  // namespace
}  // namespace trellis::env
