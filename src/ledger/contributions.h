// What each node contributed and what it cost it, summed from a ledger's verified entries
// (`trellis ledger contributions`): a submission counts once its newest verdict accepts it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/json.h"
#include "ledger/entry.h"

namespace trellis::ledger {

struct Contribution {
  std::string node;
  int64_t accepted = 0, rejected = 0;  // submissions, by their newest verdict
  int64_t work_units = 0;              // completion tokens of the accepted ones
  int64_t samples = 0;                 // samples of the accepted ones
  int64_t staked = 0, slashed = 0;
  bool evicted = false;
};

class ContributionTally {
 public:
  // Feed every verified entry in order (verify()'s visitor).
  void add(const Entry& entry, const Json& body);
  // One row per node named by any entry, by address.
  std::vector<Contribution> nodes() const;

 private:
  using Key = std::tuple<std::string, int64_t, int64_t, std::string>;  // node, step, number, sha
  struct Work {
    int64_t samples = 0, work_units = 0;
    bool submitted = false;  // a submission entry names it (a verdict alone counts nothing)
    int verdict = 0;         // 0 none yet, 1 accepted, -1 rejected
  };
  std::map<Key, Work> work_;
  std::map<std::string, Contribution> nodes_;
};

}  // namespace trellis::ledger
