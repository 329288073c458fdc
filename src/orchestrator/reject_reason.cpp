#include "orchestrator/reject_reason.h"

namespace trellis::orchestrator {
namespace {

constexpr size_t kMaxCheckName = 32;

// The length of the check name `text` starts with (lowercase words, then ": "), or 0.
size_t check_name_length(std::string_view text) {
  size_t n = 0;
  while (n < text.size() && n <= kMaxCheckName &&
         (text[n] == ' ' || (text[n] >= 'a' && text[n] <= 'z')))
    ++n;
  const bool named = n > 0 && n <= kMaxCheckName && text[0] != ' ' && text[n - 1] != ' ' &&
                     text.substr(n).starts_with(": ");
  return named ? n : 0;
}

ReasonFinding finding_of(std::string_view part) {
  const size_t n = check_name_length(part);
  if (n == 0) return {"", std::string(part)};
  return {std::string(part.substr(0, n)), std::string(part.substr(n + 2))};
}

}  // namespace

std::vector<ReasonFinding> reason_findings(std::string_view reason) {
  std::vector<ReasonFinding> out;
  if (reason.empty()) return out;
  size_t start = 0;
  for (size_t at = reason.find("; "); at != std::string_view::npos;
       at = reason.find("; ", at + 2)) {
    if (check_name_length(reason.substr(at + 2)) == 0) continue;  // "; " inside a message
    out.push_back(finding_of(reason.substr(start, at - start)));
    start = at + 2;
  }
  out.push_back(finding_of(reason.substr(start)));
  return out;
}

}  // namespace trellis::orchestrator
