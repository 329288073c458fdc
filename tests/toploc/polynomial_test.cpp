// F_65497 arithmetic: inverses against the definition, interpolation against an independent naive
// Lagrange evaluation on random point sets of many sizes, and Horner evaluation by hand.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "error_of.h"
#include "toploc/polynomial.h"

namespace trellis::toploc {
namespace {

constexpr uint64_t P = kPrime;

uint64_t pow_mod(uint64_t b, uint64_t e) {
  uint64_t r = 1;
  b %= P;
  for (; e > 0; e >>= 1, b = b * b % P) {
    if (e & 1) r = r * b % P;
  }
  return r;
}

// The Lagrange form evaluated directly at t: sum_i y_i prod_{j != i} (t - x_j) / (x_i - x_j),
// with inverses by Fermat, so it shares no code with interpolate().
uint64_t lagrange_at(const std::vector<uint32_t>& x, const std::vector<uint32_t>& y, uint64_t t) {
  uint64_t sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    uint64_t num = 1, den = 1;
    for (size_t j = 0; j < x.size(); ++j) {
      if (j == i) continue;
      num = num * ((t % P + P - x[j] % P) % P) % P;
      den = den * ((x[i] % P + P - x[j] % P) % P) % P;
    }
    sum = (sum + y[i] % P * num % P * pow_mod(den, P - 2)) % P;
  }
  return sum;
}

TEST(Polynomial, PrimeIsTheReferencePrime) {
  EXPECT_EQ(kPrime, 0xFFD9u);
  for (uint32_t d = 2; d * d <= kPrime; ++d) ASSERT_NE(kPrime % d, 0u) << d;
}

TEST(Polynomial, InverseTimesValueIsOne) {
  for (uint64_t a : {1ull, 2ull, 3ull, 12345ull, 65496ull, 65498ull, 1ull << 40}) {
    const uint32_t inv = mod_inverse(a);
    EXPECT_LT(inv, kPrime);
    EXPECT_EQ(a % P * inv % P, 1u) << a;
    EXPECT_EQ(inv, pow_mod(a, P - 2)) << a;
  }
  std::mt19937_64 rng(1);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t a = 1 + rng() % (P - 1);
    ASSERT_EQ(a * mod_inverse(a) % P, 1u) << a;
  }
  EXPECT_NE(test::error_of([] { mod_inverse(0); }).find("no inverse"), std::string::npos);
  EXPECT_NE(test::error_of([] { mod_inverse(P * 3); }).find("no inverse"), std::string::npos);
}

TEST(Polynomial, HornerMatchesTheMonomialSum) {
  const std::vector<uint16_t> c = {1, 2, 3, 4};
  EXPECT_EQ(evaluate(c, 42), (1 + 2 * 42 + 3 * 42 * 42 + 4 * 42 * 42 * 42) % P);
  EXPECT_EQ(evaluate(c, 0), 1u);
  // Arguments are reduced mod p first.
  EXPECT_EQ(evaluate(c, 42 + 5 * P), evaluate(c, 42));
  EXPECT_EQ(evaluate({}, 7), 0u);
  const std::vector<uint16_t> big = {65496, 65496, 65496};
  EXPECT_EQ(evaluate(big, 65496), (P - 1 + (P - 1) * (P - 1) % P + (P - 1)) % P);
}

TEST(Polynomial, InterpolationPassesThroughEveryPointForRandomSizes) {
  std::mt19937_64 rng(7);
  for (size_t k : {1, 2, 3, 4, 5, 8, 17, 64, 128, 200}) {
    for (int trial = 0; trial < 3; ++trial) {
      std::set<uint32_t> used;
      std::vector<uint32_t> x, y;
      while (x.size() < k) {
        const uint32_t xi = static_cast<uint32_t>(rng() % P);
        if (!used.insert(xi).second) continue;
        x.push_back(xi);
        y.push_back(static_cast<uint32_t>(rng() % 65536));  // bf16 patterns, some >= p
      }
      const std::vector<uint16_t> c = interpolate(x, y);
      ASSERT_EQ(c.size(), k);
      for (uint16_t ci : c) ASSERT_LT(ci, kPrime);
      for (size_t i = 0; i < k; ++i) {
        ASSERT_EQ(evaluate(c, x[i]), y[i] % P) << "k=" << k << " point " << i;
      }
      // Away from the points too, the coefficients are those of the Lagrange polynomial.
      for (int j = 0; j < 5; ++j) {
        const uint64_t t = rng() % P;
        ASSERT_EQ(evaluate(c, t), lagrange_at(x, y, t)) << "k=" << k << " t=" << t;
      }
    }
  }
}

TEST(Polynomial, InterpolationOfKnownPolynomialRecoversItsCoefficients) {
  // P(x) = 5 + 7x + 11x^2 + 65000x^3 through four points.
  const std::vector<uint16_t> want = {5, 7, 11, 65000};
  std::vector<uint32_t> x = {0, 1, 2, 60000}, y;
  for (uint32_t xi : x) y.push_back(evaluate(want, xi));
  EXPECT_EQ(interpolate(x, y), want);
  // A constant through one point.
  EXPECT_EQ(interpolate(std::vector<uint32_t>{9}, std::vector<uint32_t>{65500}),
            std::vector<uint16_t>{65500 - P});
}

TEST(Polynomial, InterpolationRefusesBadInput) {
  EXPECT_NE(test::error_of([] {
              interpolate(std::vector<uint32_t>{1, 2, 1}, std::vector<uint32_t>{1, 2, 3});
            }).find("are equal mod 65497"),
            std::string::npos);
  EXPECT_NE(test::error_of([] {
              interpolate(std::vector<uint32_t>{1, 1 + P}, std::vector<uint32_t>{1, 2});
            }).find("are equal"),
            std::string::npos);
  EXPECT_NE(test::error_of([] {
              interpolate(std::vector<uint32_t>{1, 2}, std::vector<uint32_t>{1});
            }).find("2 x values but 1 y values"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { interpolate({}, {}); }).find("no points"), std::string::npos);
}

}  // namespace
}  // namespace trellis::toploc
