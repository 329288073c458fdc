// The dashboard's view of the run's ledger (api_dashboard.cpp): the whole chain verified as
// `trellis ledger verify` does, what each node contributed and lost by its verified entries, and
// pages of entries to browse. It reads through a read-only connection of its own to the
// orchestrator's database (WAL lets it read while the state writes), so checking a long ledger
// never holds up a decision. A verification is linear in the ledger's length, so it is reused: made
// again once the head has moved and the last is `min_interval_s` old, or once the last is
// `max_age_s` old whatever the head (an entry edited in place moves no head).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/sqlite.h"
#include "ledger/contributions.h"
#include "ledger/verify.h"

namespace trellis::orchestrator {

class LedgerAudit {
 public:
  struct Result {
    ledger::Verification verification;
    std::vector<ledger::Contribution> contributions;  // by node address
    int64_t head_seq = 0;                             // the entries there were when it ran
    double checked_at = 0;                            // unix seconds
  };

  // The ledger in the SQLite database at `database`, kept by `keeper` (an address).
  LedgerAudit(std::filesystem::path database, std::string keeper, double min_interval_s = 5,
              double max_age_s = 60);

  // The newest verification at `now`, made first when there is none or the last is stale.
  std::shared_ptr<const Result> current(double now);
  // Up to `limit` entries numbered below `before_seq`, newest first: seq, kind, author, time_ms,
  // body (the JSON object, or its text when it is not one), hash, and whether it is within the
  // verified part of the chain (`verified_through` entries).
  Json page(int64_t before_seq, int64_t limit, int64_t verified_through);
  // The entries whose body names submission `number` of `node` for `step` (its submission entry
  // and verdicts), in order; `verified_through` as for page().
  Json naming(const std::string& node, int64_t step, int64_t number, int64_t verified_through);

 private:
  const sqlite::Database& db();  // callers hold mu_
  int64_t head_seq();            // callers hold mu_

  std::filesystem::path path_;
  std::string keeper_;
  double min_interval_s_, max_age_s_;
  std::mutex mu_;
  std::optional<sqlite::Database> db_;  // opened on first use: the state creates the file
  std::shared_ptr<const Result> last_;
};

}  // namespace trellis::orchestrator
