#include "ledger/verify.h"

#include <map>

#include <fmt/format.h>

#include "common/error.h"
#include "common/hashing.h"
#include "common/identity.h"
#include "ledger/ledger.h"

namespace trellis::ledger {
namespace {

bool has_ledger_table(const sqlite::Database& db) {
  sqlite::Statement q(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger'");
  return q.step();
}

}  // namespace

Verification verify(const sqlite::Database& db, const std::string& expected_keeper,
                    const std::function<void(const Entry&, const Json& body)>& visit) {
  Verification v;
  if (!has_ledger_table(db)) {
    v.problem = "no ledger here (an orchestrator's database holds one: orchestrator.sqlite)";
    return v;
  }
  // Each column cut to a little more than its longest valid value, so that a hostile file costs
  // bounded memory; a cut value then fails its check.
  sqlite::Statement q(
      db, fmt::format("SELECT seq, substr(prev_hash, 1, 80), substr(kind, 1, 40), "
                      "substr(author, 1, 80), time_ms, substr(body, 1, {}), "
                      "substr(signature, 1, 160), substr(hash, 1, 80), substr(seal, 1, 160) "
                      "FROM ledger ORDER BY seq",
                      kMaxBodyBytes + 1));
  std::string prev = genesis_hash();
  std::map<std::string, std::string> roles;  // address -> role, as granted so far
  for (int64_t expected = 1; q.step(); ++expected) {
    Entry e;
    e.seq = q.i64(0);
    e.prev_hash = q.text(1);
    e.statement.kind = q.text(2);
    e.statement.author = q.text(3);
    e.statement.time_ms = q.i64(4);
    e.statement.body = q.text(5);
    e.statement.signature = q.text(6);
    e.hash = q.text(7);
    e.seal = q.text(8);
    auto broken = [&](int64_t seq, std::string problem) {
      v.broken_seq = seq;
      v.problem = std::move(problem);
      return v;
    };
    if (e.seq != expected) {
      return broken(expected, fmt::format("entry {} is missing (the next entry is numbered {})",
                                          expected, e.seq));
    }
    if (e.prev_hash != prev) {
      return broken(e.seq, fmt::format("entry {} does not follow entry {}: its previous hash is "
                                       "{}, that entry's hash is {}",
                                       e.seq, e.seq - 1, e.prev_hash, prev));
    }
    Json body;
    try {
      body = checked_body(e.statement);
    } catch (const Error& err) {
      return broken(e.seq, fmt::format("entry {} is malformed: {}", e.seq, err.what()));
    }
    if (e.seq == 1) {
      if (e.statement.kind != "pool") {
        return broken(1, fmt::format("entry 1 is a {} entry, not the pool's", e.statement.kind));
      }
      v.ledger_id = body["ledger"];
      v.keeper = body["keeper"];
      if (e.statement.author != v.keeper) {
        return broken(1, "entry 1 was not stated by the keeper it names");
      }
      if (!expected_keeper.empty() && v.keeper != expected_keeper) {
        return broken(1, fmt::format("the ledger is kept by {}, not by the expected {}", v.keeper,
                                     expected_keeper));
      }
    } else if (e.statement.kind == "pool") {
      return broken(e.seq, fmt::format("entry {} is a second pool entry", e.seq));
    }
    if (!verify_signature(e.statement.author, statement_message(v.ledger_id, e.statement),
                          e.statement.signature)) {
      return broken(e.seq, fmt::format("entry {}: the {} statement's signature is not {}'s", e.seq,
                                       e.statement.kind, e.statement.author));
    }
    if (sha256_hex(entry_message(v.ledger_id, e.seq, e.prev_hash, e.statement)) != e.hash) {
      return broken(e.seq, fmt::format("entry {}: its hash does not match what it holds", e.seq));
    }
    if (!verify_signature(v.keeper, e.hash, e.seal)) {
      return broken(e.seq, fmt::format("entry {}: the keeper's seal does not verify", e.seq));
    }
    const auto role = roles.find(e.statement.author);
    const std::string problem =
        authority_problem(e.statement, v.keeper, role == roles.end() ? "" : role->second);
    if (!problem.empty()) return broken(e.seq, fmt::format("entry {}: {}", e.seq, problem));
    if (e.statement.kind == "role") roles[body["address"]] = body["role"];
    prev = e.hash;
    ++v.verified;
    if (visit) visit(e, body);
  }
  if (v.verified == 0) {
    v.problem = "the ledger is empty (not even its pool entry)";
    return v;
  }
  v.ok = true;
  return v;
}

}  // namespace trellis::ledger
