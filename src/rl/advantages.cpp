// Group-relative advantages (see advantages.h).
#include "rl/advantages.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace trellis::rl {

std::vector<double> group_advantages(const std::vector<double>& rewards, bool normalize_std) {
  for (size_t i = 0; i < rewards.size(); ++i) {
    if (!std::isfinite(rewards[i]))
      fail(fmt::format("reward of completion {} in its group", i), "reward {} is not finite",
           rewards[i]);
  }
  std::vector<double> advantages(rewards.size(), 0.0);
  // Decided by comparison, not by subtracting a rounded mean: equal rewards give exactly zero.
  const bool all_equal =
      std::all_of(rewards.begin(), rewards.end(), [&](double r) { return r == rewards.front(); });
  if (rewards.size() < 2 || all_equal) return advantages;

  const double g = static_cast<double>(rewards.size());
  double sum = 0;
  for (const double r : rewards) sum += r;
  const double mean = sum / g;
  double scale = 1;
  if (normalize_std) {
    double squares = 0;
    for (const double r : rewards) squares += (r - mean) * (r - mean);
    scale = std::sqrt(squares / (g - 1)) + 1e-6;  // unbiased std
  }
  for (size_t i = 0; i < rewards.size(); ++i) advantages[i] = (rewards[i] - mean) / scale;
  return advantages;
}

bool has_signal(const std::vector<double>& advantages) {
  return std::any_of(advantages.begin(), advantages.end(), [](double a) { return a != 0; });
}

}  // namespace trellis::rl
