// A worker's file from its work to its download: POST /work (admission), POST /submissions
// (upload URLs), PUT /upload/... (the file and its checks), and the accepted files the trainer
// reads (GET /steps/<s>/accepted, /rollouts/...) and the listing of every submission.

#include "orchestrator/api_impl.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/error.h"
#include "common/hashing.h"
#include "common/http_limits.h"
#include "common/http_service.h"
#include "common/json.h"
#include "common/logging.h"
#include "orchestrator/admission.h"
#include "orchestrator/step_counter.h"
#include "rollout/rollout_file.h"
#include "rollout/signing.h"
#include "rollout/store.h"

namespace trellis::orchestrator {

using namespace api_detail;

namespace {

bool is_sha256_hex(const std::string& s) { return rollout::is_node_address(s); }  // 64 hex digits

}  // namespace

Json api_detail::submission_json(const Submission& s) {
  return {{"id", s.id},
          {"step", s.key.step},
          {"node_address", s.key.node_address},
          {"submission", s.key.submission},
          {"status", s.status},
          {"reason", s.reason},
          {"sha256", s.sha256},
          {"size", s.size},
          {"samples", s.counts.samples},
          {"signal_samples", s.counts.signal_samples},
          {"completion_tokens", s.counts.completion_tokens},
          {"created_at", s.created_at},
          {"uploaded_at", s.uploaded_at},
          {"decided_at", s.decided_at},
          {"validator", s.validator},
          {"claimed_by", s.claimed_by},
          {"lease_expires", s.lease_expires},
          {"groups", s.groups},
          {"work_expires", s.work_expires}};
}

void Server::Impl::work(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /work";
  const Json body = parse_body(req, where);
  const std::string node = address_field(body, "node_address", where);
  WorkRequest ask;
  ask.held_version = integer_field(body, "policy_version", -1, INT32_MAX, where);
  ask.max_groups = integer_field(body, "groups", 1, INT32_MAX, where);
  require_signed_by(req, node, sha256_hex(req.body), where);
  require_member(node);
  std::lock_guard lock(admit_mu);
  const double now = unix_seconds();
  // Asking again returns the open work as it is: no request extends a lease, so a node that
  // never delivers holds its share for one lease at most.
  std::optional<Submission> given = state.open_assignment(node, now);
  if (!given) {
    const AdmissionRules rules{opt.steps, opt.batch_size, opt.group_size, opt.async_level,
                               opt.pool.validation ? max_backlog_samples() : INT64_MAX};
    const Admission a = admit(rules, state.admission_snapshot(opt.steps, opt.batch_size, now), ask);
    if (!a.step) {
      if (a.backlog_full) backlog_full_at = now;
      reply_json(res, {{"work", nullptr}, {"reason", a.wait_reason}});
      return;
    }
    given = state.assign(*a.step, node, a.groups, now + static_cast<double>(opt.work_lease_s), now);
    log::debug("orchestrator: assigned {} ({} groups)", describe(given->key), a.groups);
  }
  reply_json(res, {{"work",
                    {{"step", given->key.step},
                     {"submission", given->key.submission},
                     {"groups", given->groups},
                     {"expires", given->work_expires}}},
                   {"reason", ""}});
}

void Server::Impl::submissions(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /submissions";
  const Json body = parse_body(req, where);
  SubmissionKey key;
  key.node_address = string_field(body, "node_address", where);
  if (!rollout::is_node_address(key.node_address)) {
    refuse(400, "malformed_request",
           fmt::format(
               "field 'node_address' must be 64 lowercase hex digits (an Ed25519 public key) ({})",
               where));
  }
  key.step = integer_field(body, "step", 0, INT32_MAX, where);
  key.submission = integer_field(body, "submission", 0, INT32_MAX, where);
  const std::string sha = string_field(body, "sha256", where);
  if (!is_sha256_hex(sha)) {
    refuse(400, "malformed_request",
           fmt::format("field 'sha256' must be 64 lowercase hex digits ({})", where));
  }
  const int64_t size = integer_field(body, "size", 1, INT64_MAX, where);
  const std::string what = describe(key);
  if (size > opt.max_upload_bytes) {
    refuse(400, "too_large",
           fmt::format("{}: {} bytes is more than orchestrator.max_upload_mib ({} bytes)", what,
                       size, opt.max_upload_bytes));
  }
  require_signed_by(req, key.node_address, sha256_hex(req.body), where);
  require_member(key.node_address);
  if (key.step >= opt.steps) {
    refuse(409, "step_out_of_range",
           fmt::format("{}: the run has steps 0 to {} (rl.steps = {})", what, opt.steps - 1,
                       opt.steps));
  }
  // Work is handed out by POST /work within the step's quota and the version window, and a
  // step that fills drops its open work: what is still open here may be uploaded.
  const double now = unix_seconds();
  const std::string open = state.request(key, sha, size, opt.group_size, now);
  if (open.empty()) {
    refuse(409, "not_assigned",
           fmt::format("{} was never assigned to this node: ask for work with POST /work", what));
  }
  if (open == "accepted") refuse(409, "duplicate", fmt::format("{} is already accepted", what));
  if (open == "validating") {
    refuse(409, "in_validation", fmt::format("{} is being validated", what));
  }
  if (open != "pending") refuse_closed(*state.latest(key));  // rejected or dropped
  const int64_t expires = static_cast<int64_t>(unix_seconds()) + opt.url_ttl_s;
  const std::string path =
      fmt::format("/upload/step_{}/{}", key.step,
                  rollout::stored_file_name(key.node_address, key.submission, where));
  reply_json(res, {{"upload_url", signer.sign("PUT", path, expires)}, {"expires", expires}});
}

void Server::Impl::refuse_closed(const Submission& row) {
  refuse(409, row.status,
         fmt::format("{} was {}: ask POST /work for new work ({})", describe(row.key), row.status,
                     row.reason.substr(0, 2000)));
}

void Server::Impl::reject(const SubmissionKey& key, const std::string& kind,
                          const std::string& reason) {
  {
    std::lock_guard lock(decide_mu);
    state.reject(key, reason, unix_seconds());
  }
  log::warn("orchestrator: rejected step {} submission {} of node {}: {}", key.step, key.submission,
            key.node_address, reason);
  refuse(422, kind, reason);
}

std::optional<std::pair<std::string, std::string>> Server::Impl::check_file(
    const SubmissionKey& key, int64_t groups, const rollout::RolloutFile& file,
    const std::string& where) {
  if (file.rows.empty()) return {{"empty_file", "schema: the file has no rows"}};
  const int64_t newest = state.policy_version();
  const int64_t oldest = key.step - opt.async_level;
  for (size_t i = 0; i < file.rows.size(); ++i) {
    const auto& r = file.rows[i];
    const auto wrong = [&](const char* column, const std::string& got, const std::string& want) {
      return std::make_pair(
          std::string("wrong_rows"),
          fmt::format("step binding: row {}: {} is '{}', expected '{}'", i, column, got, want));
    };
    if (r.run_id != state.run_id()) return wrong("run_id", r.run_id, state.run_id());
    if (r.node_address != key.node_address)
      return wrong("node_address", r.node_address, key.node_address);
    if (r.step != key.step) return wrong("step", std::to_string(r.step), std::to_string(key.step));
    if (r.submission != key.submission) {
      return wrong("submission", std::to_string(r.submission), std::to_string(key.submission));
    }
    for (int32_t v : r.token_versions) {
      if (v < oldest || v > newest) {
        return {{"version_window",
                 fmt::format("version window: row {}: a token was sampled by policy version {}, "
                             "outside [{}, {}] (step {} - async_level {}, newest published "
                             "version)",
                             i, v, oldest, newest, key.step, opt.async_level)}};
      }
    }
  }
  if (groups > 0) {  // the assignment's size: what its step's quota counted on
    std::set<int32_t> indices;
    for (const auto& r : file.rows) indices.insert(r.group_index);
    const auto rows = static_cast<int64_t>(file.rows.size());
    if (static_cast<int64_t>(indices.size()) > groups || rows > groups * opt.group_size) {
      return {{"too_many_rows",
               fmt::format("upload: the file holds {} rows in {} groups; the assignment allows "
                           "{} groups of {} (rl.group_size)",
                           rows, indices.size(), groups, opt.group_size)}};
    }
  }
  try {
    rollout::verify_file_signature(file, key.node_address, where);
  } catch (const Error& e) {
    return {{"bad_signature", fmt::format("signature: {}", e.what())}};
  }
  return std::nullopt;
}

void Server::Impl::receive_upload(const httplib::Request& req, httplib::Response& res,
                                  const httplib::ContentReader& read) {
  if (uploads_receiving.fetch_add(1) >= opt.max_concurrent_uploads) {
    --uploads_receiving;
    count_refusal("busy");
    res.set_header("Retry-After", "1");
    refuse_and_close(res, 503, "busy",
                     fmt::format("{} uploads are being received (orchestrator."
                                 "max_concurrent_uploads); retry in a second",
                                 opt.max_concurrent_uploads));
    return;
  }
  struct Release {
    std::atomic<int64_t>& n;
    ~Release() { --n; }
  } release{uploads_receiving};
  std::string bytes;
  const auto limit = static_cast<size_t>(opt.max_upload_bytes);
  const bool whole = read([&](const char* data, size_t n) {
    if (bytes.size() + n > limit) return false;
    bytes.append(data, n);
    return true;
  });
  if (!whole) {
    refuse(400, "malformed_request",
           fmt::format("the body of {} did not arrive whole (at most {} bytes)", req.path, limit));
  }
  upload(req, bytes, res);
}

void Server::Impl::upload(const httplib::Request& req, const std::string& bytes,
                          httplib::Response& res) {
  const auto [key, name] = file_of(req);      // its URL was checked before the body was read
  const std::string sha = sha256_hex(bytes);  // for the signature and the declaration alike
  require_signed_by(req, key.node_address, sha, "upload of " + describe(key));
  require_member(key.node_address);  // a URL handed out before the eviction is void
  const std::string what = describe(key);
  const auto latest = state.latest(key);
  if (!latest || latest->status != "pending") {
    if (latest && latest->status == "accepted")
      refuse(409, "duplicate", what + " is already accepted");
    if (latest && latest->status == "validating")
      refuse(409, "in_validation", what + " is being validated");
    if (latest && (latest->status == "dropped" || latest->status == "rejected")) {
      refuse_closed(*latest);
    }
    refuse(409, "not_pending",
           fmt::format("{} has no pending request (ask for an upload URL with POST /submissions)",
                       what));
  }
  const std::string where = "upload of " + what;
  if (static_cast<int64_t>(bytes.size()) != latest->size) {
    reject(key, "size_mismatch",
           fmt::format("upload: the upload has {} bytes, {} were declared", bytes.size(),
                       latest->size));
  }
  if (sha != latest->sha256) {
    reject(key, "sha256_mismatch", "upload: the upload's SHA-256 differs from the one declared");
  }
  rollout::RolloutFile file;
  try {
    file = rollout::decode_rollout_file(bytes, where);
  } catch (const Error& e) {
    reject(key, "bad_file", fmt::format("schema: not a valid rollout file: {}", e.what()));
  }
  if (auto bad = check_file(key, latest->groups, file, where)) {
    reject(key, bad->first, bad->second);
  }

  // The orchestrator's checks passed: with validators the file waits for a verdict, without
  // them it is accepted now.
  const FileCounts counts = count_file(file.rows);
  const rollout::RolloutStore* waiting = opt.pool.validation ? &validating : nullptr;
  {
    std::lock_guard lock(decide_mu);
    if (state.is_accepted(key)) refuse(409, "duplicate", what + " is already accepted");
    if (state.is_validating(key)) refuse(409, "in_validation", what + " is being validated");
    require_member(key.node_address);  // evicted while the file was being checked
    if (waiting) {
      waiting->write(key.step, name, bytes);
    } else {
      store.write(key.step, name, bytes);
    }
    const double now = unix_seconds();
    // The file's hash is re-checked against the declaration in the commit itself.
    if (!(waiting ? state.start_validation(key, sha, counts, now)
                  : state.accept(key, sha, counts, now))) {
      if (waiting) {
        waiting->remove(key.step, name);
      } else {
        store.remove(key.step, name);
      }
      refuse(409, "not_pending",
             what +
                 " was decided meanwhile (its step may have closed) or its declared SHA-256 "
                 "changed: request an upload URL again");
    }
    if (!waiting) close_full_steps();
  }
  if (waiting) {
    log::info(
        "orchestrator: {} passed the checks: {} samples, {} with signal; waiting for a "
        "validator",
        what, counts.samples, counts.signal_samples);
  } else {
    log::info(
        "orchestrator: accepted step {} submission {} of node {}: {} samples, {} with signal; "
        "step counter {}",
        key.step, key.submission, key.node_address, counts.samples, counts.signal_samples,
        step_counter_now());
  }
  reply_json(res,
             {{"status", waiting ? "validating" : "accepted"},
              {"samples", counts.samples},
              {"signal_samples", counts.signal_samples}},
             waiting ? 202 : 200);
}

void Server::Impl::accepted(const httplib::Request& req, httplib::Response& res) {
  const auto step = parse_index(req.matches[1].str());
  if (!step) {
    refuse(400, "malformed_request",
           fmt::format("'{}' is not a step number", req.matches[1].str()));
  }
  Json files = Json::array();
  int64_t signal = 0;
  for (const Submission& s : state.accepted(*step)) {
    files.push_back({{"name", rollout::stored_file_name(s.key.node_address, s.key.submission, "")},
                     {"node_address", s.key.node_address},
                     {"submission", s.key.submission},
                     {"sha256", s.sha256},
                     {"size", s.size},
                     {"samples", s.counts.samples},
                     {"signal_samples", s.counts.signal_samples}});
    signal += s.counts.signal_samples;
  }
  reply_json(res, {{"step", *step}, {"files", files}, {"signal_samples", signal}});
}

void Server::Impl::download(const httplib::Request& req, httplib::Response& res) {
  const auto [key, name] = file_of(req);
  if (!state.is_accepted(key)) {
    refuse(404, "not_found",
           fmt::format("{} is not an accepted rollout file of step {}", name, key.step));
  }
  std::string bytes;
  try {
    bytes = store.read(key.step, name);
  } catch (const Error& e) {
    refuse(404, "not_found",
           fmt::format("the accepted file is missing from the store: {}", e.what()));
  }
  res.set_content(std::move(bytes), "application/vnd.apache.parquet");
}

void Server::Impl::list(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "GET /submissions";
  const std::string status = req.get_param_value("status");
  const auto& statuses = submission_statuses();
  if (!status.empty() && std::find(statuses.begin(), statuses.end(), status) == statuses.end()) {
    refuse(400, "malformed_request",
           fmt::format("query parameter 'status' must be {}, got '{}' ({})",
                       fmt::join(statuses, ", "), status.substr(0, 100), where));
  }
  std::optional<int64_t> step;
  if (req.has_param("step")) {
    step = parse_index(req.get_param_value("step"));
    if (!step) {
      refuse(400, "malformed_request",
             fmt::format("query parameter 'step' must be a step number, got '{}' ({})",
                         req.get_param_value("step").substr(0, 100), where));
    }
  }
  Json out = Json::array();
  for (const Submission& s : state.submissions(status, step)) out.push_back(submission_json(s));
  reply_json(res, {{"submissions", out}});
}

}  // namespace trellis::orchestrator
