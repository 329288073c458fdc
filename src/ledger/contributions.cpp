#include "ledger/contributions.h"

namespace trellis::ledger {

void ContributionTally::add(const Entry& entry, const Json& body) {
  const std::string& kind = entry.statement.kind;
  if (!body.contains("node")) return;  // pool, role, policy
  const std::string node = body["node"];
  Contribution& c = nodes_[node];
  c.node = node;
  if (kind == "submission" || kind == "verdict") {
    Work& w = work_[Key{node, body["step"], body["submission"], body["sha256"]}];
    if (kind == "submission") {
      w.submitted = true;
      w.samples = body["samples"];
      w.work_units = body["work_units"];
    } else {
      w.verdict = body["accepted"].get<bool>() ? 1 : -1;
    }
  } else if (kind == "stake") {
    c.staked += body["amount"].get<int64_t>();
  } else if (kind == "slash") {
    c.slashed += body["amount"].get<int64_t>();
  } else if (kind == "eviction") {
    c.evicted = true;
  }
}

std::vector<Contribution> ContributionTally::nodes() const {
  std::map<std::string, Contribution> out = nodes_;
  for (const auto& [key, w] : work_) {
    if (!w.submitted) continue;
    Contribution& c = out[std::get<0>(key)];
    if (w.verdict > 0) {
      ++c.accepted;
      c.work_units += w.work_units;
      c.samples += w.samples;
    } else if (w.verdict < 0) {
      ++c.rejected;
    }
  }
  std::vector<Contribution> rows;
  for (auto& [node, c] : out) rows.push_back(c);
  return rows;
}

}  // namespace trellis::ledger
