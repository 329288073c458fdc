// Reads a ledger back and checks it entry by entry (`trellis ledger verify`): the numbering, the
// hash chain, each statement's signature, each seal, who stated what, and each body's form. The
// ledger file may come from anyone: every column is read bounded, and nothing in it is trusted
// before its entry verifies.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/json.h"
#include "common/sqlite.h"
#include "ledger/entry.h"

namespace trellis::ledger {

struct Verification {
  bool ok = false;
  int64_t verified = 0;    // entries that verified (all of them when ok)
  std::string ledger_id;   // from the pool entry (empty when entry 1 does not verify)
  std::string keeper;      // likewise
  int64_t broken_seq = 0;  // the first entry that does not verify; 0 when ok
  std::string problem;     // what is wrong with it (or with the ledger as a whole)
};

// Verifies the ledger in `db`, calling `visit` (when given) with each entry that verified, in
// order, before the next is read. A non-empty `expected_keeper` must be the keeper's address
// (otherwise anyone could write a whole ledger of their own). Never throws for what the file
// holds; Error only for a database that cannot be read at all.
Verification verify(const sqlite::Database& db, const std::string& expected_keeper = "",
                    const std::function<void(const Entry&, const Json& body)>& visit = {});

}  // namespace trellis::ledger
