// Group advantages: hand-computed values with and without std normalisation, exact zeros for equal
// rewards (including values whose rounded mean would not subtract to zero) and for groups of one,
// the error for non-finite rewards, and has_signal.
#include "rl/advantages.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "error_of.h"

namespace trellis::rl {
namespace {

TEST(AdvantageTest, NormalisedByUnbiasedStd) {
  // mean 0.25; unbiased variance (0.75^2 + 3 * 0.25^2) / 3 = 0.25, std 0.5.
  const auto a = group_advantages({1, 0, 0, 0}, true);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_DOUBLE_EQ(a[0], 0.75 / (0.5 + 1e-6));
  for (int i = 1; i < 4; ++i) EXPECT_DOUBLE_EQ(a[i], -0.25 / (0.5 + 1e-6));
  EXPECT_DOUBLE_EQ(a[0], 1.5 / (1 + 2e-6));
}

TEST(AdvantageTest, NormalisedTwoMembers) {
  // {3, 1}: mean 2, unbiased std sqrt(2) (a biased std would be 1).
  const auto a = group_advantages({3, 1}, true);
  EXPECT_DOUBLE_EQ(a[0], 1 / (std::sqrt(2.0) + 1e-6));
  EXPECT_DOUBLE_EQ(a[1], -1 / (std::sqrt(2.0) + 1e-6));
}

TEST(AdvantageTest, DrGrpoSubtractsTheMeanOnly) {
  const auto a = group_advantages({1, 0, 0, 0}, false);
  EXPECT_EQ(a, (std::vector<double>{0.75, -0.25, -0.25, -0.25}));
  const auto b = group_advantages({2, 4, 9}, false);
  EXPECT_EQ(b, (std::vector<double>{-3, -1, 4}));
}

TEST(AdvantageTest, EqualRewardsGiveExactZeros) {
  for (const bool normalize : {true, false}) {
    // 0.1 * 3 / 3 != 0.1 in doubles: subtracting the mean would leave residues.
    for (const std::vector<double>& rewards :
         {std::vector<double>{0.1, 0.1, 0.1}, std::vector<double>(7, 0.1),
          std::vector<double>(5, 1.0 / 3), std::vector<double>{0, 0},
          std::vector<double>(16, -2.7)}) {
      const auto a = group_advantages(rewards, normalize);
      ASSERT_EQ(a.size(), rewards.size());
      for (const double x : a) EXPECT_EQ(x, 0.0);
      EXPECT_FALSE(has_signal(a));
    }
  }
  // The premise: the naive mean of seven 0.1s is not 0.1.
  double sum = 0;
  for (int i = 0; i < 7; ++i) sum += 0.1;
  EXPECT_NE(sum / 7 - 0.1, 0.0);
}

TEST(AdvantageTest, GroupOfOneIsZero) {
  for (const bool normalize : {true, false}) {
    EXPECT_EQ(group_advantages({5.0}, normalize), std::vector<double>{0.0});
    EXPECT_EQ(group_advantages({-1e9}, normalize), std::vector<double>{0.0});
    EXPECT_TRUE(group_advantages({}, normalize).empty());
  }
}

TEST(AdvantageTest, NonFiniteRewardIsAnError) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const double bad : {inf, -inf, nan}) {
    for (const bool normalize : {true, false}) {
      const auto msg = test::error_of([&] { group_advantages({1, bad, 0}, normalize); });
      EXPECT_NE(msg.find("not finite"), std::string::npos) << msg;
      EXPECT_NE(msg.find("completion 1"), std::string::npos) << msg;
      // Also when every member is the same non-finite value, or the group has one member.
      EXPECT_NE(test::error_of([&] { group_advantages({bad, bad}, normalize); }), "");
      EXPECT_NE(test::error_of([&] { group_advantages({bad}, normalize); }), "");
    }
  }
}

TEST(AdvantageTest, SignalWhenRewardsDiffer) {
  EXPECT_TRUE(has_signal(group_advantages({0.1, 0.1, 0.1 + 1e-12}, true)));
  EXPECT_TRUE(has_signal(group_advantages({1, 1, 1, 0}, false)));
  EXPECT_TRUE(has_signal({0, 0, -1e-300}));
  EXPECT_FALSE(has_signal({0, 0, -0.0}));
  EXPECT_FALSE(has_signal({}));
}

TEST(AdvantageTest, AdvantagesSumToZeroAndHaveUnitStd) {
  const std::vector<double> rewards{0.3, 1.7, -2.0, 0.0, 5.5, 1.0};
  const auto a = group_advantages(rewards, true);
  double sum = 0, squares = 0;
  for (const double x : a) sum += x;
  for (const double x : a) squares += x * x;
  EXPECT_NEAR(sum, 0, 1e-12);
  // Unbiased: sum of squares / (G - 1) = (std / (std + 1e-6))^2, just under 1.
  EXPECT_NEAR(squares / 5, 1, 1e-5);
  EXPECT_LT(squares / 5, 1);
}

}  // namespace
}  // namespace trellis::rl
