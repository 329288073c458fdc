// Philox4x32-10 against Random123's published known-answer vectors, its avalanche behaviour, and
// uniform53's exact bit layout, range and uniformity.
#include "common/rng.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace trellis {
namespace {

using Words = std::array<uint32_t, 4>;

// Random123 tests/kat_vectors, "philox4x32 10" lines: counter words, key words, expected output.
TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, IsAPureFunctionOfCounterAndKey) {
  const PhiloxCounter c{1, 2, 3, 4};
  const PhiloxKey k{5, 6};
  const auto first = philox4x32(c, k);
  philox4x32({9, 9, 9, 9}, {9, 9});  // no hidden state
  EXPECT_EQ(philox4x32(c, k), first);
}

// Flipping any one input bit (counter or key) changes about half of the 128 output bits, and every
// one of the 192 input bits matters. A wrong round count, multiplier or key schedule shows up here
// as well as in the known answers.
TEST(Philox, EveryInputBitAvalanches) {
  std::mt19937_64 gen(12345);
  double total_changed = 0;
  int trials = 0;
  for (int rep = 0; rep < 8; ++rep) {
    PhiloxCounter c;
    PhiloxKey k;
    for (auto& w : c) w = static_cast<uint32_t>(gen());
    for (auto& w : k) w = static_cast<uint32_t>(gen());
    const auto base = philox4x32(c, k);
    for (int bit = 0; bit < 192; ++bit) {
      PhiloxCounter c2 = c;
      PhiloxKey k2 = k;
      if (bit < 128) {
        c2[bit / 32] ^= 1u << (bit % 32);
      } else {
        k2[(bit - 128) / 32] ^= 1u << (bit % 32);
      }
      const auto out = philox4x32(c2, k2);
      int changed = 0;
      for (int i = 0; i < 4; ++i) changed += std::popcount(out[i] ^ base[i]);
      EXPECT_GT(changed, 30) << "bit " << bit;  // binomial(128, 1/2): mean 64, sd 5.7
      EXPECT_LT(changed, 98) << "bit " << bit;
      total_changed += changed;
      ++trials;
    }
  }
  // 1536 trials: the mean number of flipped bits is 64 +- 0.15 (sd).
  EXPECT_NEAR(total_changed / trials, 64.0, 1.0);
}

TEST(Philox, ConsecutiveCountersGiveDistinctBlocks) {
  std::set<Words> seen;
  for (uint32_t i = 0; i < 5000; ++i) seen.insert(philox4x32({i, 0, 0, 0}, {7, 0}));
  for (uint32_t i = 0; i < 5000; ++i) seen.insert(philox4x32({i, 0, 0, 0}, {8, 0}));
  EXPECT_EQ(seen.size(), 10000u);
}

TEST(Uniform53, ExactBitLayout) {
  EXPECT_EQ(uniform53(0, 0), 0.0);
  EXPECT_EQ(uniform53(0, 0x7ff), 0.0);  // the low 11 bits of `lo` are dropped
  EXPECT_EQ(uniform53(0, 0x800), 0x1p-53);
  EXPECT_EQ(uniform53(0, 0x80000000), 0x1p-33);
  EXPECT_EQ(uniform53(1, 0), 0x1p-32);
  EXPECT_EQ(uniform53(0x80000000, 0), 0.5);
  EXPECT_EQ(uniform53(0xffffffff, 0), 1.0 - 0x1p-32);
  EXPECT_EQ(uniform53(0xffffffff, 0xffffffff), 1.0 - 0x1p-53);
  EXPECT_LT(uniform53(0xffffffff, 0xffffffff), 1.0);
  EXPECT_EQ(uniform53(0xffffffff, 0xffffffff), std::nextafter(1.0, 0.0));
}

// Monotone in the 53-bit value (hi, top 21 bits of lo), and always a multiple of 2^-53 in [0, 1).
TEST(Uniform53, MonotoneAndOnTheGrid) {
  std::mt19937_64 gen(99);
  auto bits53 = [](uint32_t hi, uint32_t lo) { return (uint64_t{hi} << 21) | (lo >> 11); };
  for (int i = 0; i < 20000; ++i) {
    const auto a = static_cast<uint32_t>(gen()), b = static_cast<uint32_t>(gen());
    // Half the pairs share `hi`, so ordering by `lo` alone is exercised too.
    const auto c = i % 2 ? a : static_cast<uint32_t>(gen()), d = static_cast<uint32_t>(gen());
    const double x = uniform53(a, b), y = uniform53(c, d);
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    const double scaled = std::ldexp(x, 53);
    ASSERT_EQ(scaled, std::floor(scaled));
    const uint64_t bx = bits53(a, b), by = bits53(c, d);
    if (bx < by) {
      ASSERT_LT(x, y);
    }
    if (bx == by) {
      ASSERT_EQ(x, y);
    }
    if (bx > by) {
      ASSERT_GT(x, y);
    }
  }
}

// uniform53 of consecutive Philox blocks: mean, variance and a 64-bin chi-square against U[0, 1),
// plus the lag-1 correlation. Deterministic (fixed key), so a pass is a pass everywhere.
TEST(Uniform53, PhiloxStreamIsUniform) {
  constexpr int kN = 64000, kBins = 64;
  std::vector<int> counts(kBins, 0);
  double sum = 0, sum2 = 0, lag = 0, prev = 0;
  for (int i = 0; i < kN; ++i) {
    const auto w = philox4x32({static_cast<uint32_t>(i), 0, 0, 0}, {0xdeadbeef, 42});
    const double x = uniform53(w[0], w[1]);
    sum += x;
    sum2 += x * x;
    if (i > 0) lag += (x - 0.5) * (prev - 0.5);
    prev = x;
    ++counts[static_cast<int>(x * kBins)];
  }
  const double mean = sum / kN, var = sum2 / kN - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / kN));
  EXPECT_NEAR(var, 1.0 / 12, 5 * std::sqrt(1.0 / 180 / kN));
  EXPECT_NEAR(lag / (kN - 1) * 12, 0.0, 5 / std::sqrt(double(kN)));
  double chi2 = 0;
  const double expected = double(kN) / kBins;
  for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
  // 63 degrees of freedom: mean 63, sd 11.2; 120 is beyond 5 sd.
  EXPECT_LT(chi2, 120.0);
  EXPECT_GT(chi2, 25.0);  // suspiciously perfect would mean a non-random stream
}

}  // namespace
}  // namespace trellis
