#include "ledger/entry.h"

#include <chrono>
#include <limits>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "common/hashing.h"
#include "common/identity.h"

namespace trellis::ledger {
namespace {

bool is_lower_hex(const std::string& s, size_t digits) {
  if (s.size() != digits) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

enum class Field { kAddress, kSha256, kText, kCount, kBool, kObject };

// Each kind's fields; a body holds exactly these (nothing else, so that no signed field goes
// unchecked).
const std::map<std::string, std::vector<std::pair<const char*, Field>>>& kinds() {
  static const std::map<std::string, std::vector<std::pair<const char*, Field>>> k = {
      {"pool", {{"ledger", Field::kText}, {"keeper", Field::kAddress}, {"policy", Field::kObject}}},
      {"role", {{"address", Field::kAddress}, {"role", Field::kText}}},
      {"registration", {{"node", Field::kAddress}, {"ip", Field::kText}}},
      {"invite", {{"node", Field::kAddress}, {"pool", Field::kText}, {"nonce", Field::kText}}},
      {"submission",
       {{"node", Field::kAddress},
        {"step", Field::kCount},
        {"submission", Field::kCount},
        {"sha256", Field::kSha256},
        {"samples", Field::kCount},
        {"work_units", Field::kCount}}},
      {"verdict",
       {{"node", Field::kAddress},
        {"step", Field::kCount},
        {"submission", Field::kCount},
        {"sha256", Field::kSha256},
        {"accepted", Field::kBool},
        {"reason", Field::kText}}},
      {"stake", {{"node", Field::kAddress}, {"amount", Field::kCount}}},
      {"slash", {{"node", Field::kAddress}, {"amount", Field::kCount}, {"reason", Field::kText}}},
      {"approval", {{"node", Field::kAddress}}},
      {"eviction", {{"node", Field::kAddress}, {"reason", Field::kText}}},
      {"policy", {{"version", Field::kCount}}},
  };
  return k;
}

void check_field(const Json& body, const char* name, Field type, const std::string& where) {
  if (!body.contains(name)) fail(where, "missing field '{}'", name);
  const Json& v = body.at(name);
  bool ok = false;
  switch (type) {
    case Field::kAddress:  // an Ed25519 public key
    case Field::kSha256:
      ok = v.is_string() && is_lower_hex(v.get<std::string>(), 64);
      break;
    case Field::kText:
      ok = v.is_string();
      break;
    case Field::kCount:
      ok = json_integer_in(v, 0, std::numeric_limits<int64_t>::max());
      break;
    case Field::kBool:
      ok = v.is_boolean();
      break;
    case Field::kObject:
      ok = v.is_object();
      break;
  }
  if (!ok) fail(where, "field '{}' = {} is not what a {} entry holds there", name, v.dump(), where);
}

}  // namespace

const std::string& genesis_hash() {
  static const std::string zeros(64, '0');
  return zeros;
}

std::string statement_message(const std::string& ledger_id, const Statement& s) {
  // Every field but the body is free of newlines (checked_body and the callers see to it), and
  // the body is last: the message splits back into its fields in one way only.
  return fmt::format("trellis-ledger-statement-v1\n{}\n{}\n{}\n{}\n{}", ledger_id, s.kind, s.author,
                     s.time_ms, s.body);
}

std::string entry_message(const std::string& ledger_id, int64_t seq, const std::string& prev_hash,
                          const Statement& s) {
  return fmt::format("trellis-ledger-entry-v1\n{}\n{}\n{}\n{}", seq, prev_hash, s.signature,
                     statement_message(ledger_id, s));
}

Statement make_statement(const std::string& ledger_id, const Identity& author,
                         const std::string& kind, const Json& body, int64_t time_ms) {
  Statement s;
  s.kind = kind;
  s.author = author.address();
  s.time_ms = time_ms;
  s.body = body.dump();
  (void)checked_body(s);  // a malformed statement is our bug: refuse to sign it
  s.signature = author.sign_hex(statement_message(ledger_id, s));
  return s;
}

Json checked_body(const Statement& s) {
  const auto kind = kinds().find(s.kind);
  if (kind == kinds().end()) fail("ledger statement", "unknown kind '{}'", s.kind);
  if (!is_lower_hex(s.author, 64)) fail(s.kind, "the author is not an address (64 hex digits)");
  if (s.time_ms < 0) fail(s.kind, "negative time {}", s.time_ms);
  if (s.body.size() > kMaxBodyBytes) {
    fail(s.kind, "the body holds {} bytes, over the limit of {}", s.body.size(), kMaxBodyBytes);
  }
  Json body = parse_json(s.body, s.kind + " body");
  if (!body.is_object()) fail(s.kind, "the body is not a JSON object");
  for (const auto& [name, type] : kind->second) check_field(body, name, type, s.kind);
  if (body.size() != kind->second.size()) {
    for (const auto& [name, value] : body.items()) {
      bool known = false;
      for (const auto& field : kind->second) known = known || name == field.first;
      if (!known) fail(s.kind, "unexpected field '{}'", name);
    }
  }
  if (s.kind == "role") {
    const std::string role = body["role"];
    if (role != "trainer" && role != "validator") fail(s.kind, "unknown role '{}'", role);
  }
  return body;
}

Json submission_body(const std::string& node, int64_t step, int64_t submission,
                     const std::string& sha256, int64_t samples, int64_t work_units) {
  return {{"node", node},     {"step", step},       {"submission", submission},
          {"sha256", sha256}, {"samples", samples}, {"work_units", work_units}};
}

Json verdict_body(const std::string& node, int64_t step, int64_t submission,
                  const std::string& sha256, bool accepted, const std::string& reason) {
  return {{"node", node},     {"step", step},         {"submission", submission},
          {"sha256", sha256}, {"accepted", accepted}, {"reason", reason}};
}

std::string authority_problem(const Statement& s, const std::string& keeper,
                              const std::string& author_role) {
  if (s.author == keeper) return "";
  if (s.kind == "verdict" && author_role == "validator") return "";
  if (s.kind == "policy" && author_role == "trainer") return "";
  return fmt::format("{} may not state a {} entry (only the keeper{})", s.author, s.kind,
                     s.kind == "verdict"  ? " or a validator"
                     : s.kind == "policy" ? " or the trainer"
                                          : "");
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace trellis::ledger
