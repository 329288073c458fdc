// One validator's judgement of a submission (specs/toploc.md §5, §6): the file is decoded with
// the strict schema and checked whole (binding to its node, step and submission, the node's
// signature, file_checks.h), then a random subset of its completions, which the worker cannot
// predict, goes through the model checks (sample_checks.h). Every finding is collected into the
// reject reason, each starting with the name of its check.
//
// A hostile file never escapes as an exception: anything a check throws becomes a finding of that
// check (a reject), except CannotJudge (finding.h: a policy that cannot be fetched, our own prefill
// not finite), which validate() passes on so that the file gets no verdict. Each file has a time
// budget (Rules::max_file_seconds, policy downloads excluded) and a row cap.
//
// Not thread-safe: one validation at a time (the policies it recomputes with are shared).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "env/environment.h"
#include "model/prompting.h"
#include "rl/task_source.h"
#include "validator/budget.h"
#include "validator/file_checks.h"
#include "validator/sample_checks.h"

namespace trellis::validator {

// What the orchestrator says a submission is: every row must belong to it.
struct Expected {
  std::string run_id, node_address;
  int64_t step = 0, submission = 0;
  int64_t policy_version = 0;  // the newest published when the submission was claimed
};

struct Report {
  bool accepted = false;
  std::vector<Finding> findings;            // every objection, in the order found
  std::string reason;                       // the first few findings, "; "-joined; "" = accepted
  int64_t rows = 0, tokens = 0;             // in the file
  int64_t checked = 0, checked_tokens = 0;  // through the model checks
  std::vector<SampleStats> samples;         // one per checked completion
  double file_seconds = 0, model_seconds = 0;
  // One line for logs: rows, checked, worst TOPLOC statistics and sampling distance, times.
  std::string summary() const;
};

class Validator {
 public:
  // The run's rules, environment and task source come from `config` (the same task seed workers
  // use); `model_of` gives the policy of each claimed version (it throws CannotJudge when it
  // cannot); `limits` are the policy architecture's (token ids, context).
  Validator(const Config& config, const model::Prompting& prompting, ModelOf model_of,
            ModelLimits limits = {});

  // The verdict on one uploaded file. Throws only CannotJudge.
  Report validate(std::string_view bytes, const Expected& expected);
  // The orchestrator accepted the file the last validate() judged honest: its drawn groups may
  // not appear in another file.
  void accepted();

  const Rules& rules() const { return *rules_; }

 private:
  std::vector<size_t> choose_rows(size_t rows);
  // The model checks of the chosen rows, within the budget; findings and stats into `report`.
  void check_models(const rollout::RolloutFile& file, Budget& budget, Report& report);

  const model::Prompting& prompting_;
  ModelOf model_of_;
  ModelLimits limits_;
  std::unique_ptr<env::Environment> environment_;
  std::unique_ptr<rl::TaskSource> tasks_;
  std::unique_ptr<Rules> rules_;
  std::vector<int32_t> stops_;
  SeenDraws seen_;
  SeenDraws last_draws_;  // of the last file judged honest, until accepted()
  std::mt19937_64 rng_;
};

}  // namespace trellis::validator
