// The ledger's keeper side (specs/protocol.md §2): appends entries to the ledger table of an
// SQLite database, the orchestrator's own, so that each entry commits in the same transaction as
// the change it records (no accepted submission without its entry, and no entry without it).
// Reading and verifying: verify.h; sums per node: contributions.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "common/identity.h"
#include "common/json.h"
#include "common/sqlite.h"
#include "ledger/entry.h"

namespace trellis::ledger {

// The table's name and columns (seq INTEGER PRIMARY KEY, prev_hash, kind, author, time_ms, body,
// signature, hash, seal).
constexpr const char* kTable = "ledger";

class Ledger {
 public:
  // The ledger in `db`: its table is created when absent, and a new ledger starts with the pool
  // entry naming `ledger_id`, the keeper's address and `policy`. Call inside a transaction. Error
  // when `db` holds a ledger of another id or keeper, or `ledger_id` is not 1 to 256
  // characters without control characters (it is a line of every signed message).
  Ledger(const sqlite::Database& db, Identity keeper, const std::string& ledger_id,
         const Json& policy);

  const std::string& id() const { return id_; }
  const Identity& keeper() const { return keeper_; }

  // A statement of the keeper's, made now.
  Statement state(const std::string& kind, const Json& body) const;
  // Appends `s` as the next entry and returns it. Call inside a transaction. Error when `s` is
  // malformed, its signature does not verify, or its author may not state its kind.
  Entry append(const Statement& s);
  Entry record(const std::string& kind, const Json& body) { return append(state(kind, body)); }

  // The role the ledger granted `address` ("trainer", "validator"; "" for none).
  std::string role_of(const std::string& address) const;
  // The newest entry's number and hash (what to record elsewhere to detect a cut tail).
  std::pair<int64_t, std::string> head() const;
  // Work units staked for `node`, less those slashed.
  int64_t stake_of(const std::string& node) const;
  // Whether an approval entry names `node`.
  bool approved(const std::string& node) const;

 private:
  const sqlite::Database& db_;
  Identity keeper_;
  std::string id_;
};

}  // namespace trellis::ledger
