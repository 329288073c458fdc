#include "rl/sample_stats.h"

#include <algorithm>
#include <numeric>

namespace trellis::rl {

void SampleStats::add(const Rollout& r) {
  reward_ += r.reward;
  task_reward_ += r.task_reward;
  max_len_ = std::max<double>(max_len_, static_cast<double>(r.tokens()));
  truncated_ += r.finish == "length";
  tokens_ += r.tokens();
  ++samples_;
}

void SampleStats::write(Metrics& m) const {
  const double n = std::max<double>(1.0, static_cast<double>(samples_));
  m.set("reward/mean", reward_ / n);
  m.set("reward/task", task_reward_ / n);
  m.set("reward/length_penalty", (task_reward_ - reward_) / n);
  m.set("seq_len/mean", static_cast<double>(tokens_) / n);
  m.set("seq_len/max", max_len_);
  m.set("truncated/frac", truncated_ / n);
}

void write_staleness(const std::vector<Rollout>& batch, int64_t step, Metrics& m) {
  double sum = 0, count = 0, max = 0;
  for (const auto& r : batch) {
    for (int64_t v : r.versions) {
      sum += static_cast<double>(step - v);
      max = std::max<double>(max, static_cast<double>(step - v));
      count += 1;
    }
  }
  m.set("staleness/mean", count > 0 ? sum / count : 0.0);
  m.set("staleness/max", max);
}

void write_total_clip(Metrics& m) {
  m.set("clip/total_frac",
        m.has("clip/low_frac")
            ? m.get("clip/low_frac") + m.get("clip/high_frac") + m.get("clip/delta_frac")
            : 0.0);
}

void RecentReward::add(Metrics& m) {
  last_.push_back(m.get("reward/mean"));
  if (last_.size() > 10) last_.pop_front();
  m.set("reward/recent",
        std::accumulate(last_.begin(), last_.end(), 0.0) / static_cast<double>(last_.size()));
}

const std::vector<ConsoleField>& rl_console_fields() {
  static const std::vector<ConsoleField> fields = {
      {"reward/mean", "reward", "%.3f"},
      {"reward/recent", "10-step mean", "%.3f"},
      {"seq_len/mean", "len", "%.1f"},
      {"loss", "loss", "%+.4f"},
      {"entropy", "entropy", "%.3f"},
      {"grad_norm", "grad", "%.3f"},
      {"mismatch/k3", "k3", "%.2e"},
      {"clip/total_frac", "clipped", "%.1f%%", 100.0},
      {"staleness/mean", "stale", "%.1f"},
      {"filter/zero_adv_groups", "no-signal groups", "%.0f"},
      {"time/wait_for_data", "gen s", "%.1f"},
      {"time/train", "train s", "%.1f"},
      {"trainer/idle_frac", "idle", "%.0f%%", 100.0},
      {"throughput/mfu", "MFU", "%.1f%%", 100.0},
  };
  return fields;
}

}  // namespace trellis::rl
