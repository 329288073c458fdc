// Sample statistics of a rollout step, shared by the single-process loop and the distributed
// trainer so that both report the same specs/rl.md §8 metrics the same way: reward (total, task,
// length penalty), completion length, truncation, over every sample generated for the step
// (including groups that online filtering drops), and staleness over the trained tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "rl/metrics_log.h"
#include "rl/rollouts.h"

namespace trellis::rl {

class SampleStats {
 public:
  void add(const Rollout& r);
  int64_t samples() const { return samples_; }
  int64_t tokens() const { return tokens_; }
  // reward/mean, reward/task, reward/length_penalty, seq_len/mean, seq_len/max, truncated/frac.
  void write(Metrics& m) const;

 private:
  double reward_ = 0, task_reward_ = 0, max_len_ = 0, truncated_ = 0;
  int64_t samples_ = 0, tokens_ = 0;
};

// staleness/mean and staleness/max: step − version over every completion token of `batch`.
void write_staleness(const std::vector<Rollout>& batch, int64_t step, Metrics& m);

// clip/total_frac: the low, high and δ clipping fractions summed (0 for a step without an update).
void write_total_clip(Metrics& m);

// The console's "10-step mean": add() sets reward/recent to the mean reward/mean of the last 10
// steps including m's (single steps are noisy). Console only; metrics.jsonl keeps per-step values.
class RecentReward {
 public:
  void add(Metrics& m);

 private:
  std::deque<double> last_;
};

// The console fields of an RL step line (`trellis rl` and `trellis trainer`).
const std::vector<ConsoleField>& rl_console_fields();

}  // namespace trellis::rl
