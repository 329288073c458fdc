#include "shardcast/relay_selection.h"

#include <algorithm>

#include "common/error.h"

namespace trellis::shardcast {

RelayChoice parse_relay_choice(const std::string& name, const std::string& where) {
  if (name == "weighted") return RelayChoice::Weighted;
  if (name == "fastest") return RelayChoice::Fastest;
  fail(where, "unknown relay choice '{}' (weighted | fastest)", name);
}

RelaySelector::RelaySelector(std::vector<std::string> urls, RelayChoice choice, uint64_t seed)
    : urls_(urls), choice_(choice), rng_(seed) {
  for (auto& u : urls) relays_.push_back({std::move(u)});
}

void RelaySelector::seed(size_t relay, bool ok, double bytes_per_s) {
  std::lock_guard lock(mu_);
  relays_.at(relay).bandwidth = ok ? bytes_per_s : 0;
  relays_.at(relay).success = ok ? 1 : 0;
}

void RelaySelector::record(size_t relay, bool ok, int64_t bytes, double seconds) {
  std::lock_guard lock(mu_);
  RelayStats& r = relays_.at(relay);
  const double sample = ok ? static_cast<double>(bytes) / std::max(seconds, 1e-6) : 0;
  r.bandwidth = kAlpha * sample + (1 - kAlpha) * r.bandwidth;
  r.success = kAlpha * (ok ? 1 : 0) + (1 - kAlpha) * r.success;
  ++r.downloads;
  r.failures += !ok;
  r.bytes += ok ? bytes : 0;
  for (auto& other : relays_) other.success = std::min(1.0, other.success + kHeal);
}

int RelaySelector::choose(const std::vector<bool>& eligible) {
  std::lock_guard lock(mu_);
  double best = 0;
  for (size_t i = 0; i < relays_.size(); ++i)
    if (eligible.at(i)) best = std::max(best, relays_[i].bandwidth);
  const double floor = best > 0 ? best * 0.01 : 1;
  std::vector<double> weights(relays_.size(), 0);
  for (size_t i = 0; i < relays_.size(); ++i)
    if (eligible[i])
      weights[i] = std::max(relays_[i].success, 1e-3) * std::max(relays_[i].bandwidth, floor);
  if (choice_ == RelayChoice::Fastest) {
    const auto it = std::max_element(weights.begin(), weights.end());
    return *it > 0 ? static_cast<int>(it - weights.begin()) : -1;
  }
  double total = 0;
  for (double w : weights) total += w;
  if (total <= 0) return -1;
  double x = rng_.uniform() * total;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    if (x < weights[i]) return static_cast<int>(i);
    x -= weights[i];
  }
  for (size_t i = weights.size(); i-- > 0;)  // rounding: the last eligible relay
    if (weights[i] > 0) return static_cast<int>(i);
  return -1;
}

std::vector<RelayStats> RelaySelector::stats() const {
  std::lock_guard lock(mu_);
  return relays_;
}

}  // namespace trellis::shardcast
