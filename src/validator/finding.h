// A check's objection to a submission: which check (the reason's first word, so that operators and
// the attack tests can tell checks apart) and what it found, naming the row.
#pragma once

#include <string>

namespace trellis::validator {

struct Finding {
  // "schema", "data sampling", "bounds", "reward", "toploc", "sampling", "termination"
  std::string check;
  std::string message;
  std::string text() const { return check + ": " + message; }
};

}  // namespace trellis::validator
