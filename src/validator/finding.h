// A check's objection to a submission: which check (the reason's first word, so that operators and
// the attack tests can tell checks apart) and what it found, naming the row. And the one failure
// that is not an objection: CannotJudge, when the validator itself cannot judge a file.
#pragma once

#include <string>

#include "common/error.h"

namespace trellis::validator {

struct Finding {
  // "schema", "data sampling", "bounds", "reward", "toploc", "sampling", "termination",
  // "precision" (an FP8 run's rows not computed in FP8), "prefill" (recomputing the checked rows
  // failed), "time budget" (validator.max_file_seconds)
  std::string check;
  std::string message;
  std::string text() const { return check + ": " + message; }
};

// The validator, not the file, is at fault: a policy version it cannot fetch, its own prefill
// producing non-finite values, a stop request. The file gets no verdict (the lease runs out and
// another try judges it). Every other exception thrown while checking a file is a reject.
class CannotJudge : public Error {
 public:
  using Error::Error;
};

}  // namespace trellis::validator
