// A reject reason split into the findings that decided it. Validators and the orchestrator's own
// upload checks write each finding as "<check>: <message>" (validator/finding.h) and join several
// with "; ", so "toploc: chunk 3 ...; sampling: token 17 ..." names two checks. The dashboard
// shows them one per line.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trellis::orchestrator {

struct ReasonFinding {
  std::string check;    // "toploc", "data sampling", ...; "" when the text names none
  std::string message;  // the rest
};

// The findings of `reason` in order: it is cut at each "; " followed by a check name (lowercase
// letters and spaces, then ": "), so a "; " inside a message does not split it. [] for "".
std::vector<ReasonFinding> reason_findings(std::string_view reason);

}  // namespace trellis::orchestrator
