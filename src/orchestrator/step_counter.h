// The step counter (specs/rl.md §5, specs/protocol.md §4): the smallest trainer step that still
// lacks rl.batch_size accepted *signal samples*, i.e. completions in prompt groups whose rewards
// are not all equal (a group where every completion scored the same has zero advantage and teaches
// nothing; online filtering drops it). Pure functions, so the rule is testable on its own.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "rollout/rollout_record.h"

namespace trellis::orchestrator {

// What one file contributes to its step.
struct FileCounts {
  int64_t samples = 0;            // rows
  int64_t signal_samples = 0;     // rows in groups (same group_index) whose rewards differ
  int64_t completion_tokens = 0;  // sum of completion lengths
};

FileCounts count_file(const std::vector<rollout::RolloutRecord>& rows);

// The smallest step in [0, steps) whose accepted signal samples (`signal_by_step`, absent = 0)
// are fewer than `batch_size`; `steps` when every step has enough.
int64_t step_counter(const std::map<int64_t, int64_t>& signal_by_step, int64_t steps,
                     int64_t batch_size);

}  // namespace trellis::orchestrator
