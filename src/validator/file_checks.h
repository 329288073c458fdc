// The checks that cover every row of a submission and need no model (specs/toploc.md §5):
//   schema         group structure (whole groups of G rows sharing task and prompt), temperature,
//                  lengths, token ids, one proof chunk per 32 committed rows
//   data sampling  each group's prompt and seeds are the ones fixed data sampling assigns to
//                  (node, step, submission) - recomputed here, never taken from the file
//   bounds         versions non-decreasing within a row and inside the async window, length
//                  penalty and total reward as the run computes them, advantages equal to the
//                  group formula of the rewards
//   reward         the environment's verifier, run again on a random sample of the completions
//                  (all of them up to Rules::max_reward_checks), gives the worker's task reward
// Every field of a row is range-checked (schema) before any other check uses it: a hostile file is
// a finding, never a crash. Every finding is returned, in file order, each naming its row or group;
// checks that need sane rows run only once every row passed the schema. A file that passes may
// still fail the model checks (sample_checks.h) on its sampled rows.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "env/environment.h"
#include "model/prompting.h"
#include "rl/task_source.h"
#include "rollout/rollout_file.h"
#include "validator/budget.h"
#include "validator/finding.h"
#include "validator/rules.h"

namespace trellis::validator {

// Everything the whole-file checks read besides the file: the run's rules, its environment and
// tasks (the same task source every worker draws from), the model's prompting and limits, the
// file's time budget (null: Rules::max_file_seconds from the call) and the validator's randomness
// choosing which rewards to recompute (null: fresh entropy). The worker cannot predict either.
struct FileContext {
  const Rules& rules;
  const env::Environment& environment;
  const rl::TaskSource& tasks;
  const model::Prompting& prompting;
  ModelLimits limits = {};
  Budget* budget = nullptr;
  std::mt19937_64* rng = nullptr;
};

// The draw (node, step, draw number, place) of every group in files the orchestrator accepted,
// with the (step, submission) of the file that used it: a C3PO++ worker must not submit the same
// drawn group in two files. The same file judged again (a worker retrying an upload after an
// orchestrator restart) is no repeat. Not thread-safe.
using DrawKey = std::tuple<std::string, int64_t, int64_t, int64_t>;
using SeenDraws = std::map<DrawKey, std::pair<int64_t, int64_t>>;

// `policy_version` is the newest version the trainer had published when the file was claimed.
// `seen` (may be null) holds the draws of earlier accepted files of the run; the draws of this
// file are added to it only by remember_draws() once it is accepted. Empty: the file passed.
// Exceptions thrown inside a check (the verifier's, the tokenizer's) become findings of that check.
std::vector<Finding> check_file(const rollout::RolloutFile& file, const FileContext& context,
                                int64_t policy_version, const SeenDraws* seen);

// The first objection to one row's fields that every later check relies on (lengths that agree,
// token ids below `vocab`, a prompt and completion that fit the context, finite numbers, a proof
// of the right size), or nullopt. `vocab` > 0; limits.context 0 = unchecked.
std::optional<Finding> check_row_fields(const rollout::RolloutRecord& row, size_t row_index,
                                        const Rules& rules, int64_t vocab, int64_t context);

// Adds the draws of an accepted file's groups to `seen` (Rules::partial_rollouts as above).
void remember_draws(const rollout::RolloutFile& file, bool partial_rollouts, SeenDraws& seen);

// The stop ids a worker's engine ends completions on (the chat template's end of turn too).
std::vector<int32_t> stop_ids(const model::Prompting& prompting);

}  // namespace trellis::validator
