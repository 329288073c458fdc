// Admission control (specs/protocol.md §6): the orchestrator decides which step a worker generates
// for next, and how many prompt groups, so that what is generated for a step stays within a small
// bound of what the step needs.
//
// A step needs rl.batch_size signal samples (step_counter.h). Its quota counts what it already has
// or will have: the signal samples of its accepted and validating files, plus the expected signal
// of its open assignments (handed out, file not yet uploaded, lease not expired): their groups ×
// rl.group_size × the signal ratio of recent uploads. A worker asking for work gets the lowest step
// from the step counter up to what its policy version allows (held version + async_level, and
// never beyond the newest published version + async_level) whose quota is short (by more than
// half a group's expected signal while it has open work), with the number of groups nearest to
// the shortfall (at least one, at most what it asked for). A rejected file leaves the quota, so
// its share is handed out again. When every such step is covered, or the samples waiting for a
// verdict or being generated reach orchestrator.max_backlog_steps steps' worth (with validators),
// the worker waits.
//
// Pure functions over a snapshot of the state, so that the rule is testable on its own.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace trellis::orchestrator {

// What one step holds and is owed.
struct StepTally {
  int64_t accepted_signal = 0;    // signal samples of accepted files
  int64_t validating_signal = 0;  // signal samples of files waiting for a verdict
  int64_t open_groups = 0;        // groups of unexpired assignments whose files have not arrived
};

// The state admission decides on (State::admission_snapshot).
struct AdmissionSnapshot {
  int64_t counter = 0;                 // the step counter
  int64_t policy_version = 0;          // the newest published version
  std::map<int64_t, StepTally> steps;  // steps >= counter with anything; absent = nothing yet
  // Signal samples per sample over recent uploads; 1 before the first (an optimistic guess costs
  // one more small assignment, a pessimistic one surplus).
  double signal_ratio = 1;
  int64_t validating_samples = 0;  // every step's files waiting for a verdict
  int64_t open_groups = 0;         // every step's unexpired open assignments
};

struct AdmissionRules {
  int64_t steps = 1, batch_size = 1, group_size = 1, async_level = 0;
  // Validating samples plus open assignments' samples stay at or below this (no bound without
  // validators: INT64_MAX).
  int64_t max_backlog_samples = INT64_MAX;
};

// What a worker asks for: it holds `held_version` (-1: none yet) and wants files of at most
// `max_groups` groups.
struct WorkRequest {
  int64_t held_version = -1;
  int64_t max_groups = 1;
};

// The answer: a step and a group count, or why the worker waits.
struct Admission {
  std::optional<int64_t> step;
  int64_t groups = 0;
  std::string wait_reason;  // when !step
  // It waits for the backlog bound while a whole step's worth waits for a verdict: validators
  // are behind.
  bool backlog_full = false;
};

// Signal samples `tally` is expected to hold once its open assignments arrive.
double expected_signal(const StepTally& tally, int64_t group_size, double signal_ratio);

Admission admit(const AdmissionRules& rules, const AdmissionSnapshot& snapshot,
                const WorkRequest& request);

}  // namespace trellis::orchestrator
