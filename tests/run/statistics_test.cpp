// Statistics over series: step-windowed means that skip non-finite values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "run/statistics.h"

namespace trellis::run {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Statistics, MovingAverageWindowIsInStepsAndSkipsNaN) {
  std::vector<Point> p = {{0, 1}, {1, kNaN}, {2, 3}, {5, 5}, {12, 7}, {30, kNaN}};
  std::vector<Point> m = moving_average(p, 10);
  ASSERT_EQ(m.size(), p.size());
  EXPECT_DOUBLE_EQ(m[0].value, 1);
  EXPECT_DOUBLE_EQ(m[1].value, 1);      // NaN skipped
  EXPECT_DOUBLE_EQ(m[2].value, 2);      // (1 + 3) / 2
  EXPECT_DOUBLE_EQ(m[3].value, 3);      // (1 + 3 + 5) / 3
  EXPECT_DOUBLE_EQ(m[4].value, 6);      // window (2, 12]: 5 and 7
  EXPECT_TRUE(std::isnan(m[5].value));  // window (20, 30] holds only NaN
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(m[i].step, p[i].step);
  EXPECT_TRUE(moving_average({}, 10).empty());
}

TEST(Statistics, WindowMeanSumAndLast) {
  std::vector<Point> p = {{0, 2}, {1, 4}, {2, kNaN}, {3, 9}, {4, kNaN}};
  EXPECT_DOUBLE_EQ(window_mean(p, 0, 1), 3);
  EXPECT_DOUBLE_EQ(window_mean(p, 1, 4), 6.5);
  EXPECT_TRUE(std::isnan(window_mean(p, 4, 9)));
  EXPECT_DOUBLE_EQ(finite_sum(p), 15);
  EXPECT_DOUBLE_EQ(last_finite(p), 9);
  EXPECT_TRUE(std::isnan(last_finite({{0, kNaN}})));
  EXPECT_EQ(finite_sum({}), 0);
}

}  // namespace
}  // namespace trellis::run
