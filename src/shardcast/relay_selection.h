// Which relay to download the next shard from (specs/shardcast.md §4). Each relay has a bandwidth
// estimate `bw` (bytes/s) and a success rate `sr`, both exponential moving averages (α = 0.3)
// seeded by a probe download. A shard goes to a relay drawn at random with weight sr × bw: never
// always to the fastest, which piles every client onto one link while the others idle. A failure
// counts as bandwidth 0 (not its time-out), and after every update each relay's sr heals by 0.01,
// so a relay that failed once is tried again later. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/rng.h"

namespace trellis::shardcast {

enum class RelayChoice { Weighted, Fastest };
// "weighted" | "fastest"; Error naming `where` otherwise.
RelayChoice parse_relay_choice(const std::string& name, const std::string& where);

struct RelayStats {
  std::string url;
  double bandwidth = 0;  // bytes per second (EMA)
  double success = 1;    // EMA of 1 (ok) / 0 (failed)
  int64_t downloads = 0, failures = 0, bytes = 0;
};

class RelaySelector {
 public:
  static constexpr double kAlpha = 0.3, kHeal = 0.01;

  RelaySelector(std::vector<std::string> urls, RelayChoice choice, uint64_t seed);

  // The probe's result seeds the estimates (replacing them).
  void seed(size_t relay, bool ok, double bytes_per_s);
  // One download's outcome: bw ← α·sample + (1−α)·bw (sample 0 on failure), sr likewise, then every
  // relay's sr heals.
  void record(size_t relay, bool ok, int64_t bytes, double seconds);
  // A relay among those with eligible[i] true; -1 when none is. A relay whose bandwidth estimate
  // is 0 keeps a floor weight (1% of the best), so that it can heal.
  int choose(const std::vector<bool>& eligible);

  std::vector<RelayStats> stats() const;
  size_t size() const { return urls_.size(); }
  const std::string& url(size_t relay) const { return urls_.at(relay); }

 private:
  mutable std::mutex mu_;
  std::vector<RelayStats> relays_;
  const std::vector<std::string> urls_;  // immutable: read without the lock
  RelayChoice choice_;
  RandomStream rng_;
};

}  // namespace trellis::shardcast
