#include "run/statistics.h"

#include <cmath>
#include <limits>

namespace trellis::run {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

double window_mean(const std::vector<Point>& points, double lo, double hi) {
  double sum = 0;
  int64_t n = 0;
  for (const Point& p : points) {
    if (p.step >= lo && p.step <= hi && std::isfinite(p.value)) {
      sum += p.value;
      ++n;
    }
  }
  return n > 0 ? sum / double(n) : kNaN;
}

std::vector<Point> moving_average(const std::vector<Point>& points, int64_t window) {
  std::vector<Point> out;
  out.reserve(points.size());
  // A running sum over the window [first, i]; recomputed rather than subtracted when a value
  // leaves, so that one huge value does not leave rounding residue behind.
  size_t first = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    while (points[first].step <= points[i].step - double(window)) ++first;
    double sum = 0;
    int64_t n = 0;
    for (size_t j = first; j <= i; ++j) {
      if (std::isfinite(points[j].value)) {
        sum += points[j].value;
        ++n;
      }
    }
    out.push_back({points[i].step, n > 0 ? sum / double(n) : kNaN});
  }
  return out;
}

double finite_sum(const std::vector<Point>& points) {
  double sum = 0;
  for (const Point& p : points)
    if (std::isfinite(p.value)) sum += p.value;
  return sum;
}

double last_finite(const std::vector<Point>& points) {
  for (auto it = points.rbegin(); it != points.rend(); ++it)
    if (std::isfinite(it->value)) return it->value;
  return kNaN;
}

}  // namespace trellis::run
