// The checks that cover every row of a submission and need no model (specs/toploc.md §5):
//   schema         group structure (whole groups of G rows sharing task and prompt), temperature,
//                  lengths, token ids, one proof chunk per 32 committed rows
//   data sampling  each group's prompt and seeds are the ones fixed data sampling assigns to
//                  (node, step, submission) - recomputed here, never taken from the file
//   bounds         versions non-decreasing within a row and inside the async window, length
//                  penalty and total reward as the run computes them, advantages equal to the
//                  group formula of the rewards
//   reward         the environment's verifier, run again on every completion, gives the worker's
//                  task reward
// The first failure is returned; a file that passes may still fail the model checks
// (sample_checks.h) on its sampled rows.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "env/environment.h"
#include "model/prompting.h"
#include "rl/task_source.h"
#include "rollout/rollout_file.h"
#include "validator/finding.h"
#include "validator/rules.h"

namespace trellis::validator {

// Everything the whole-file checks read besides the file: the run's rules, its environment and
// tasks (the same task source every worker draws from), and the model's prompting.
struct FileContext {
  const Rules& rules;
  const env::Environment& environment;
  const rl::TaskSource& tasks;
  const model::Prompting& prompting;
};

// The draw (node, step, draw number, place) of every group in files the orchestrator accepted,
// with the (step, submission) of the file that used it: a C3PO++ worker must not submit the same
// drawn group in two files. The same file judged again (a worker retrying an upload after an
// orchestrator restart) is no repeat. Not thread-safe.
using DrawKey = std::tuple<std::string, int64_t, int64_t, int64_t>;
using SeenDraws = std::map<DrawKey, std::pair<int64_t, int64_t>>;

// `policy_version` is the newest version the trainer had published when the file was claimed.
// `seen` (may be null) holds the draws of earlier accepted files of the run; the draws of this
// file are added to it only by remember_draws() once it is accepted.
std::optional<Finding> check_file(const rollout::RolloutFile& file, const FileContext& context,
                                  int64_t policy_version, const SeenDraws* seen);

// Adds the draws of an accepted file's groups to `seen` (Rules::partial_rollouts as above).
void remember_draws(const rollout::RolloutFile& file, bool partial_rollouts, SeenDraws& seen);

// The stop ids a worker's engine ends completions on (the chat template's end of turn too).
std::vector<int32_t> stop_ids(const model::Prompting& prompting);

}  // namespace trellis::validator
