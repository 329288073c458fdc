// The time a validator may spend judging one file (validator.max_file_seconds): a worker must not
// be able to hold a validator for hours with a file of slow code tasks or huge rows. Time spent
// waiting for a policy version (a download, not the file's doing) is excluded. A file whose checks
// run past the budget is rejected ("time budget"). Not thread-safe.
#pragma once

#include <string>

#include <fmt/format.h>

#include "common/clock.h"
#include "validator/finding.h"

namespace trellis::validator {

class Budget {
 public:
  // `seconds` from now; <= 0 = no budget.
  explicit Budget(double seconds) : seconds_(seconds), start_(monotonic_seconds()) {}

  // Seconds used so far, not counting excluded time.
  double used() const { return monotonic_seconds() - start_ - excluded_; }
  bool spent() const { return seconds_ > 0 && used() > seconds_; }
  // Time the file is not to blame for (fetching a policy version).
  void exclude(double seconds) { excluded_ += seconds; }

  // The reject reason when spent(): `where` says what was being checked when the budget ran out.
  Finding finding(const std::string& where) const {
    return {"time budget",
            fmt::format("checking the file took more than validator.max_file_seconds = {} s "
                        "({:.2f} s used); stopped at {}",
                        seconds_, used(), where)};
  }

 private:
  double seconds_, start_, excluded_ = 0;
};

}  // namespace trellis::validator
