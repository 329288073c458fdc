#include "orchestrator/step_counter.h"

#include <algorithm>

namespace trellis::orchestrator {

FileCounts count_file(const std::vector<rollout::RolloutRecord>& rows) {
  struct Group {
    int64_t rows = 0;
    float min_reward = 0, max_reward = 0;
  };
  std::map<int32_t, Group> groups;
  FileCounts c;
  for (const auto& r : rows) {
    auto [it, fresh] = groups.try_emplace(r.group_index);
    Group& g = it->second;
    if (fresh) g.min_reward = g.max_reward = r.reward;
    g.min_reward = std::min(g.min_reward, r.reward);
    g.max_reward = std::max(g.max_reward, r.reward);
    ++g.rows;
    ++c.samples;
    c.completion_tokens += static_cast<int64_t>(r.completion_tokens.size());
  }
  for (const auto& [index, g] : groups) {
    if (g.min_reward != g.max_reward) c.signal_samples += g.rows;
  }
  return c;
}

int64_t step_counter(const std::map<int64_t, int64_t>& signal_by_step, int64_t steps,
                     int64_t batch_size) {
  for (int64_t s = 0; s < steps; ++s) {
    const auto it = signal_by_step.find(s);
    if (it == signal_by_step.end() || it->second < batch_size) return s;
  }
  return steps;
}

}  // namespace trellis::orchestrator
