// One entry of the ledger (specs/protocol.md §2): a statement, signed by its author, placed in a
// hash chain and sealed by the ledger's keeper (the orchestrator).
//
// A statement is what its author says: a kind, a JSON object (the body), and the time. Its
// signature covers the ledger's id too, so a statement cannot be replayed into another ledger.
// The keeper numbers statements as they come, links each to the previous entry's hash, and signs
// that hash (the seal): an entry cannot be changed, removed or moved without the keeper's key,
// and a statement cannot be changed without its author's.
//
// Who may state what (checked on append and by verify):
//   pool          the first entry, and only there: the keeper's; {"ledger", "keeper", "policy"}
//   role          keeper: {"address", "role": "trainer" | "validator"} grants an author
//   registration  keeper: {"node", "ip"}
//   invite        keeper: {"node", "pool", "nonce"}
//   submission    keeper: {"node", "step", "submission", "sha256", "samples", "work_units"}
//   verdict       keeper or a validator: {"node", "step", "submission", "sha256", "accepted",
//                 "reason"}
//   stake         keeper: {"node", "amount"}
//   slash         keeper: {"node", "amount", "reason"}
//   approval      keeper: {"node"} (the pool owner admits the address)
//   eviction      keeper: {"node", "reason"}
//   policy        keeper or the trainer: {"version"}
#pragma once

#include <cstdint>
#include <string>

#include "common/json.h"

namespace trellis {
class Identity;
}

namespace trellis::ledger {

// A body larger than this is refused on append and reported by verify (a ledger file may come
// from anyone).
constexpr size_t kMaxBodyBytes = 64 * 1024;

struct Statement {
  std::string kind;
  std::string author;     // Ed25519 address, 64 hex digits
  int64_t time_ms = 0;    // unix milliseconds, as the author stated
  std::string body;       // a JSON object's text, exactly as signed
  std::string signature;  // the author's, of statement_message()
};

struct Entry {
  int64_t seq = 0;        // 1, 2, ... without gaps
  std::string prev_hash;  // the previous entry's hash; 64 zeros before the first
  Statement statement;
  std::string hash;  // SHA-256 (hex) of entry_message()
  std::string seal;  // the keeper's signature of `hash`
};

// The hash before the first entry.
const std::string& genesis_hash();

// What the author signs.
std::string statement_message(const std::string& ledger_id, const Statement& s);
// What the entry's hash is the SHA-256 of.
std::string entry_message(const std::string& ledger_id, int64_t seq, const std::string& prev_hash,
                          const Statement& s);

// A statement by `author` of `kind` with `body` at `time_ms`, signed for `ledger_id`.
Statement make_statement(const std::string& ledger_id, const Identity& author,
                         const std::string& kind, const Json& body, int64_t time_ms);

// The body of a statement as JSON, after checking that it is well formed for its kind (the
// fields above, with their types; numbers non-negative, addresses and hashes hex); Error saying
// what is wrong otherwise. Does not check the signature or who the author is.
Json checked_body(const Statement& s);

// The bodies of the entries that record work: what the orchestrator states when a file passed
// its checks, and what a validator (or the orchestrator, running without validators) states when
// it decides. Built in one place so that a validator's signed verdict and the orchestrator's
// rebuilding of it agree byte for byte.
Json submission_body(const std::string& node, int64_t step, int64_t submission,
                     const std::string& sha256, int64_t samples, int64_t work_units);
Json verdict_body(const std::string& node, int64_t step, int64_t submission,
                  const std::string& sha256, bool accepted, const std::string& reason);

// Why `s.author` may not state `s.kind` ("" when it may): `keeper` is the ledger's keeper and
// `author_role` the role the ledger granted the author ("" for none).
std::string authority_problem(const Statement& s, const std::string& keeper,
                              const std::string& author_role);

// Unix milliseconds now.
int64_t now_ms();

}  // namespace trellis::ledger
