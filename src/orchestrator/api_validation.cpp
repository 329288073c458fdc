// Trusted validators' verdicts on the files waiting for one: POST /validation/claim, GET
// /validation/files/..., POST /validation/verdict; what accepting or rejecting a file does, and
// the steps that close once they hold what they need.

#include "orchestrator/api_impl.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/error.h"
#include "common/http_service.h"
#include "common/identity.h"
#include "common/json.h"
#include "common/logging.h"
#include "ledger/entry.h"

namespace trellis::orchestrator {

using namespace api_detail;

namespace {

bool bool_field(const Json& body, const char* key, const std::string& where) {
  if (!body.contains(key))
    refuse(400, "malformed_request", fmt::format("missing field '{}' ({})", key, where));
  const Json& v = body.at(key);
  if (!v.is_boolean()) {
    refuse(400, "malformed_request",
           fmt::format("field '{}' must be true or false, got {} ({})", key, v.type_name(), where));
  }
  return v.get<bool>();
}

// The path of GET /validation/files for `key`.
std::string validation_file_path(const SubmissionKey& key) {
  return fmt::format("/validation/files/step_{}/{}", key.step, file_name(key));
}

// A submission claimed by this many validators without a verdict (each lease ran out: the file
// stopped them) is rejected rather than offered to the next.
constexpr int kMaxClaims = 2;
constexpr size_t kMaxVerdictReasonBytes = 4000;  // of a validator's reason to reject
constexpr size_t kMaxValidatorNameBytes = 100;

// The `validator` field of a validation request: the validator's name, for logs and records.
std::string validator_field(const Json& body, const std::string& where) {
  std::string v = string_field(body, "validator", where);
  if (v.empty() || v.size() > kMaxValidatorNameBytes) {
    refuse(400, "malformed_request",
           fmt::format("field 'validator' must name the validator in 1 to {} bytes ({})",
                       kMaxValidatorNameBytes, where));
  }
  return v;
}

}  // namespace

void Server::Impl::claim(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /validation/claim";
  const std::string validator = validator_field(parse_body(req, where), where);
  auto s = state.claim(validator, static_cast<double>(opt.validation_lease_s), unix_seconds());
  while (s && std::count(s->claimed_by.begin(), s->claimed_by.end(), ',') >= kMaxClaims) {
    reject_stalled(*s);  // the file stopped every validator that claimed it
    s = state.claim(validator, static_cast<double>(opt.validation_lease_s), unix_seconds());
  }
  Json submission = nullptr;
  if (s) {
    submission = {{"step", s->key.step},
                  {"node_address", s->key.node_address},
                  {"submission", s->key.submission},
                  {"sha256", s->sha256},
                  {"size", s->size},
                  {"samples", s->counts.samples},
                  {"signal_samples", s->counts.signal_samples},
                  {"uploaded_at", s->uploaded_at},
                  {"file", validation_file_path(s->key)},
                  {"lease_expires", s->lease_expires}};
    log::info("orchestrator: validator {} claimed {} for {} s", validator, describe(s->key),
              opt.validation_lease_s);
  }
  reply_json(res, {{"submission", submission},
                   {"policy_version", state.policy_version()},
                   {"async_level", opt.async_level}});
}

void Server::Impl::validation_file(const httplib::Request& req, httplib::Response& res) {
  const auto [key, name] = file_of(req);
  if (!state.is_validating(key)) {
    refuse(404, "not_found",
           fmt::format("{} of step {} is not waiting for a validator's verdict", name, key.step));
  }
  std::string bytes;
  try {
    bytes = validating.read(key.step, name);
  } catch (const Error& e) {
    refuse(404, "not_found", fmt::format("the validating file is missing: {}", e.what()));
  }
  res.set_content(std::move(bytes), "application/vnd.apache.parquet");
}

void Server::Impl::verdict(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /validation/verdict";
  const Json body = parse_body(req, where);
  SubmissionKey key;
  key.step = integer_field(body, "step", 0, INT32_MAX, where);
  key.node_address = address_field(body, "node_address", where);
  key.submission = integer_field(body, "submission", 0, INT32_MAX, where);
  const bool accept = bool_field(body, "accept", where);
  std::string why;
  if (body.contains("reason")) why = string_field(body, "reason", where);
  if (!accept && why.empty()) {
    refuse(400, "malformed_request",
           fmt::format("field 'reason' must say why the submission is rejected ({})", where));
  }
  if (why.size() > kMaxVerdictReasonBytes) {
    refuse(
        400, "malformed_request",
        fmt::format("field 'reason' is longer than {} bytes ({})", kMaxVerdictReasonBytes, where));
  }
  const std::string validator = validator_field(body, where);
  // The validator's own signed statement of this verdict, for the ledger (optional: without
  // it the orchestrator states the verdict, which the validator token vouched for).
  std::optional<ledger::Statement> statement;
  if (body.contains("ledger_signature")) {
    statement = ledger::Statement{};
    statement->kind = "verdict";
    statement->author = address_field(body, "validator_address", where);
    statement->time_ms = integer_field(body, "ledger_time_ms", 0, INT64_MAX, where);
    statement->signature = string_field(body, "ledger_signature", where);
  }
  int64_t checked = -1;
  if (body.contains("checked_samples")) {
    checked = integer_field(body, "checked_samples", 0, INT32_MAX, where);
  }

  std::lock_guard lock(decide_mu);
  const auto row = state.latest(key);
  if (!row || row->status != "validating") {
    const std::string now_is = !row                        ? "there is no such submission"
                               : row->status == "accepted" ? "it is accepted already"
                               : row->status == "rejected" || row->status == "dropped"
                                   ? fmt::format("it was {}: {}", row->status, row->reason)
                                   : "its file has not arrived";
    refuse(409, "not_validating",
           fmt::format("{} is not being validated: {}", describe(key), now_is.substr(0, 2000)));
  }
  const std::string samples_checked =
      checked < 0 ? "" : fmt::format(" ({} of {} samples checked)", checked, row->counts.samples);
  if (statement) {
    statement->body =
        ledger::verdict_body(key.node_address, key.step, key.submission, row->sha256, accept, why)
            .dump();
    if (!verify_signature(statement->author,
                          ledger::statement_message(state.ledger().id(), *statement),
                          statement->signature)) {
      refuse(
          400, "bad_signature",
          fmt::format("field 'ledger_signature' is not {}'s signature of this verdict on "
                      "{} (file {}) in run {} ({})",
                      statement->author, describe(key), row->sha256, state.ledger().id(), where));
    }
  }
  const std::string status = accept
                                 ? accept_verdict(*row, validator, samples_checked, statement)
                                 : reject_verdict(*row, validator, why, samples_checked, statement);
  reply_json(res, {{"status", status}});
}

void Server::Impl::reject_stalled(const Submission& s) {
  std::lock_guard lock(decide_mu);
  const auto row = state.latest(s.key);
  if (!row || row->status != "validating") return;  // decided meanwhile
  const std::string before = s.claimed_by.substr(0, s.claimed_by.rfind(','));
  reject_verdict(*row, "orchestrator",
                 fmt::format("validation: the file stopped {} validators without a verdict "
                             "({}): each lease of {} s ran out",
                             kMaxClaims, before, opt.validation_lease_s),
                 "");
}

std::string Server::Impl::accept_verdict(const Submission& row, const std::string& validator,
                                         const std::string& samples_checked,
                                         const std::optional<ledger::Statement>& statement) {
  const SubmissionKey& key = row.key;
  if (const auto n = state.node(key.node_address); n && n->evicted) {
    // Evictions reject validating submissions as they happen; this is the belt to that brace.
    const Eviction e = state.evict(key.node_address, n->evicted_reason, unix_seconds());
    drop_files(e.rejected);
    log_eviction(e);
    return "rejected";
  }
  const std::string name = file_name(key);
  try {
    validating.move_to(key.step, name, store.path(key.step, name));
  } catch (const Error& e) {
    refuse(500, "storage_error",
           fmt::format("cannot move {} into the rollout store: {}", describe(key), e.what()));
  }
  bool accepted = false;
  try {
    accepted = state.accept_validated(key, validator, unix_seconds(), statement);
  } catch (...) {
    validating.move_from(store.path(key.step, name), key.step, name);
    throw;
  }
  if (!accepted) {  // cannot happen under decide_mu; undone all the same
    validating.move_from(store.path(key.step, name), key.step, name);
    refuse(409, "not_validating", describe(key) + " was decided meanwhile");
  }
  log::info("orchestrator: validator {} accepted {}{}: {} samples, {} with signal; step counter {}",
            validator, describe(key), samples_checked, row.counts.samples,
            row.counts.signal_samples, step_counter_now());
  close_full_steps();
  return "accepted";
}

void Server::Impl::close_full_steps() {
  std::map<int64_t, std::pair<int64_t, int64_t>> by_step;  // validating, still in flight
  for (const Submission& s : state.close_full_steps(opt.batch_size, unix_seconds())) {
    if (s.status == "validating") {
      ++by_step[s.key.step].first;
      try {  // committed: a file left behind is removed by the next start
        validating.remove(s.key.step, file_name(s.key));
      } catch (const Error& e) {
        log::error("orchestrator: {}", e.what());
      }
    } else {
      ++by_step[s.key.step].second;
    }
  }
  for (const auto& [step, n] : by_step) {
    log::info(
        "orchestrator: step {} closed; dropped its surplus unjudged: {} file{} waiting for a "
        "validator, {} assignment{} in flight",
        step, n.first, n.first == 1 ? "" : "s", n.second, n.second == 1 ? "" : "s");
  }
}

std::string Server::Impl::reject_verdict(const Submission& row, const std::string& validator,
                                         const std::string& why, const std::string& samples_checked,
                                         const std::optional<ledger::Statement>& statement) {
  const SubmissionKey& key = row.key;
  const std::string reason = fmt::format("validator {}: {}", validator, why);
  const std::string evict_reason = opt.pool.evict_on_reject
                                       ? fmt::format("validator rejected step {} submission {}: {}",
                                                     key.step, key.submission, why)
                                       : "";
  const Rejection r =
      state.reject_validated(key, reason, validator, evict_reason, unix_seconds(), statement);
  if (!r.rejected) refuse(409, "not_validating", describe(key) + " was decided meanwhile");
  const std::string name = file_name(key);
  try {  // committed: a failure to keep the file is logged (the next start retries it)
    validating.move_to(key.step, name, rejected.path(key.step, name));
  } catch (const Error& e) {
    log::error("orchestrator: {}", e.what());
  }
  log::warn("orchestrator: validator {} rejected {}{}: {} (node {} has {} rejection{})", validator,
            describe(key), samples_checked, why, key.node_address, r.eviction.node.rejections,
            r.eviction.node.rejections == 1 ? "" : "s");
  if (!evict_reason.empty()) {
    drop_files(r.eviction.rejected);
    log_eviction(r.eviction);
  }
  return "rejected";
}

}  // namespace trellis::orchestrator
