#include "ledger/ledger.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/hashing.h"

namespace trellis::ledger {
namespace {

bool valid_ledger_id(const std::string& id) {
  if (id.empty() || id.size() > 256) return false;
  for (char c : id) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

Ledger::Ledger(const sqlite::Database& db, Identity keeper, const std::string& ledger_id,
               const Json& policy)
    : db_(db), keeper_(std::move(keeper)), id_(ledger_id) {
  if (!valid_ledger_id(id_)) {
    fail("ledger", "the ledger id '{}' is not 1 to 256 characters without control characters", id_);
  }
  db_.exec(
      "CREATE TABLE IF NOT EXISTS ledger (seq INTEGER PRIMARY KEY, prev_hash TEXT NOT NULL, kind "
      "TEXT NOT NULL, author TEXT NOT NULL, time_ms INTEGER NOT NULL, body TEXT NOT NULL, "
      "signature TEXT NOT NULL, hash TEXT NOT NULL, seal TEXT NOT NULL)");
  sqlite::Statement first(db_, "SELECT author, body FROM ledger WHERE seq = 1");
  if (!first.step()) {
    append(state("pool", {{"ledger", id_}, {"keeper", keeper_.address()}, {"policy", policy}}));
    return;
  }
  const std::string author = first.text(0);
  const Json pool = parse_json(first.text(1), db_.where() + ": ledger entry 1");
  const std::string kept_as = pool.is_object() ? pool.value("ledger", std::string()) : "";
  if (author != keeper_.address() || kept_as != id_) {
    fail(db_.where(),
         "the ledger there is '{}', kept by {}; this orchestrator keeps '{}' with key {} (use "
         "the key file and run of that ledger, or another data directory)",
         kept_as, author, id_, keeper_.address());
  }
}

Statement Ledger::state(const std::string& kind, const Json& body) const {
  return make_statement(id_, keeper_, kind, body, now_ms());
}

std::string Ledger::role_of(const std::string& address) const {
  sqlite::Statement q(db_, "SELECT body FROM ledger WHERE kind = 'role' AND author = ?");
  q.bind(keeper_.address());
  std::string role;
  while (q.step()) {
    const Json body = parse_json(q.text(0), db_.where() + ": a role entry");
    if (body.value("address", std::string()) == address) role = body.value("role", std::string());
  }
  return role;
}

std::pair<int64_t, std::string> Ledger::head() const {
  sqlite::Statement q(db_, "SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1");
  if (!q.step()) return {0, genesis_hash()};
  return {q.i64(0), q.text(1)};
}

int64_t Ledger::stake_of(const std::string& node) const {
  sqlite::Statement q(db_,
                      "SELECT COALESCE(SUM(CASE kind WHEN 'stake' THEN json_extract(body, "
                      "'$.amount') ELSE -json_extract(body, '$.amount') END), 0) FROM ledger "
                      "WHERE kind IN ('stake', 'slash') AND json_extract(body, '$.node') = ?");
  q.bind(node);
  return q.step() ? q.i64(0) : 0;
}

bool Ledger::approved(const std::string& node) const {
  sqlite::Statement q(
      db_, "SELECT 1 FROM ledger WHERE kind = 'approval' AND json_extract(body, '$.node') = ?");
  q.bind(node);
  return q.step();
}

Entry Ledger::append(const Statement& s) {
  (void)checked_body(s);
  if (!verify_signature(s.author, statement_message(id_, s), s.signature)) {
    fail("ledger", "the {} statement's signature is not {}'s", s.kind, s.author);
  }
  const std::string problem = authority_problem(s, keeper_.address(), role_of(s.author));
  if (!problem.empty()) fail("ledger", "{}", problem);
  Entry e;
  e.statement = s;
  sqlite::Statement last(db_, "SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1");
  if (last.step()) {
    e.seq = last.i64(0) + 1;
    e.prev_hash = last.text(1);
  } else {
    if (s.kind != "pool") fail("ledger", "the first entry must be the pool's, not {}", s.kind);
    e.seq = 1;
    e.prev_hash = genesis_hash();
  }
  if (s.kind == "pool" && e.seq != 1) fail("ledger", "a pool entry may only come first");
  e.hash = sha256_hex(entry_message(id_, e.seq, e.prev_hash, s));
  e.seal = keeper_.sign_hex(e.hash);
  sqlite::Statement insert(db_,
                           "INSERT INTO ledger (seq, prev_hash, kind, author, time_ms, body, "
                           "signature, hash, seal) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  insert.bind(e.seq).bind(e.prev_hash).bind(s.kind).bind(s.author).bind(s.time_ms).bind(s.body);
  insert.bind(s.signature).bind(e.hash).bind(e.seal).step();
  return e;
}

}  // namespace trellis::ledger
