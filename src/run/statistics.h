// Statistics over a metric's series (run/metrics_history.h): windowed means, moving averages and
// totals, each skipping non-finite values, as the run report's summary and smoothed curves use.
#pragma once

#include <cstdint>
#include <vector>

#include "run/metrics_history.h"

namespace trellis::run {

// Mean of the finite values whose step lies in [lo, hi]; NaN when there are none.
double window_mean(const std::vector<Point>& points, double lo, double hi);

// For each point, the mean of the finite values whose step lies in (step - window, step]: a
// trailing moving average over `window` steps (not `window` lines, so missing steps shorten the
// window rather than stretch it). NaN where the window holds no finite value. `points` must be
// sorted by step; window >= 1.
std::vector<Point> moving_average(const std::vector<Point>& points, int64_t window);

// Sum of the finite values (0 when there are none).
double finite_sum(const std::vector<Point>& points);

// The value of the last point with a finite value; NaN when there is none.
double last_finite(const std::vector<Point>& points);

}  // namespace trellis::run
