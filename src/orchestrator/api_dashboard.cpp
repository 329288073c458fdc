// The operator's dashboard (docs/dashboard.md): GET /dashboard serves the page, whose script polls
// GET /dashboard/api/summary and pages through /dashboard/api/submissions and /ledger; and the
// relays' reports of what they hold (POST /relays), which only the dashboard shows. Every
// dashboard route needs the operator's (trainer's) token, as a bearer token or as the password of
// HTTP Basic authentication, which is what a browser can send by itself.

#include "orchestrator/api_impl.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/base64.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/http_service.h"
#include "common/json.h"
#include "orchestrator/dashboard_files.h"
#include "orchestrator/reject_reason.h"

namespace trellis::orchestrator {

using namespace api_detail;

namespace {

constexpr int64_t kTrainingSteps = 2000;  // the newest steps the plots get
constexpr int64_t kMaxPage = 200;         // submissions or ledger entries per page
constexpr int64_t kDefaultPage = 50;
constexpr size_t kMaxRelayReports = 64;
constexpr size_t kMaxRelayVersions = 64;
constexpr size_t kMaxRelayText = 256;  // bytes of a relay's name or URL

// An optional integer query parameter in [lo, hi]: 400 naming it when malformed.
int64_t query_integer(const httplib::Request& req, const char* name, int64_t lo, int64_t hi,
                      int64_t fallback, const std::string& where) {
  if (!req.has_param(name)) return fallback;
  const auto v = parse_index(req.get_param_value(name));
  if (!v || *v < lo || *v > hi) {
    refuse(400, "malformed_request",
           fmt::format("{} must be an integer from {} to {} ({})", name, lo, hi, where));
  }
  return *v;
}

// A submission as the dashboard lists it: GET /submissions' fields, the node under a short name.
Json dashboard_submission_json(const Submission& s) {
  Json j = submission_json(s);
  j["node"] = s.key.node_address;
  return j;
}

Json verification_json(const LedgerAudit::Result& r, const State& state,
                       const std::pair<int64_t, std::string>& head) {
  const ledger::Verification& v = r.verification;
  return {{"id", state.ledger().id()},
          {"keeper", state.ledger().keeper().address()},
          {"seq", head.first},
          {"hash", head.second},
          {"ok", v.ok},
          {"verified", v.verified},
          {"checked_seq", r.head_seq},
          {"broken_seq", v.broken_seq},
          {"problem", v.problem},
          {"checked_at", r.checked_at}};
}

// A printable string field of at most kMaxRelayText bytes.
std::string short_text_field(const Json& body, const char* key, const std::string& where) {
  const std::string text = string_field(body, key, where);
  bool printable = !text.empty() && text.size() <= kMaxRelayText;
  for (const char c : text) printable = printable && c >= 0x20 && c < 0x7f;
  if (!printable) {
    refuse(400, "malformed_request",
           fmt::format("field '{}' must be 1 to {} printable ASCII characters ({})", key,
                       kMaxRelayText, where));
  }
  return text;
}

}  // namespace

bool api_detail::is_dashboard_path(std::string_view path) {
  return path == "/dashboard" || path.starts_with("/dashboard/");
}

std::string api_detail::basic_password(const std::string& authorization) {
  constexpr std::string_view kScheme = "Basic ";
  if (!authorization.starts_with(kScheme) || authorization.size() > 1024) return "";
  try {
    const std::string decoded =
        base64_decode(std::string_view(authorization).substr(kScheme.size()), "Authorization");
    const size_t colon = decoded.find(':');
    return colon == std::string::npos ? "" : decoded.substr(colon + 1);
  } catch (const Error&) {
    return "";
  }
}

void api_detail::set_dashboard_headers(httplib::Response& res) {
  res.set_header("Content-Security-Policy",
                 "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                 "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-store");
}

void Server::Impl::serve_dashboard_file(const httplib::Request& req, httplib::Response& res) {
  const std::string suffix = req.matches[1].str();
  const auto file =
      dashboard_file(suffix.empty() || suffix == "/" ? "index.html" : suffix.substr(1));
  if (!file) refuse(404, "not_found", fmt::format("there is no dashboard file {}", req.path));
  res.set_content(std::string(file->body), std::string(file->content_type));
}

void Server::Impl::dashboard_summary(const httplib::Request& req, httplib::Response& res) {
  const double now = unix_seconds();
  const auto audit_now = audit.current(now);

  // Nodes: the registry, what discovery said of them, their newest heartbeat's agent state, and
  // what the verified ledger credits and charges them.
  std::map<std::string, const ledger::Contribution*> credit;
  for (const auto& c : audit_now->contributions) credit[c.node] = &c;
  const auto metadata = state.node_metadata();
  std::map<std::string, std::string> agents;
  {
    std::lock_guard lock(reports_mu);
    agents = agent_states;
  }
  const auto describe_node = [&](Json j) {
    const std::string address = j.at("address").get<std::string>();
    const auto agent = agents.find(address);
    j["agent_state"] = agent == agents.end() ? "" : agent->second;
    j["hardware"] = Json();
    j["software_version"] = "";
    if (const auto m = metadata.find(address); m != metadata.end()) {
      const Json parsed = Json::parse(m->second, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) {
        j["hardware"] = parsed.value("hardware", Json());
        j["software_version"] = parsed.value("software_version", "");
      }
    }
    const auto c = credit.find(address);
    const ledger::Contribution none;
    const ledger::Contribution& got = c == credit.end() ? none : *c->second;
    j["accepted"] = got.accepted;
    j["rejected"] = got.rejected;
    j["work_units"] = got.work_units;
    j["samples"] = got.samples;
    j["staked"] = got.staked;
    j["slashed"] = got.slashed;
    j["stake"] = got.staked - got.slashed;
    j["has_logs"] = !state.node_endpoint(address).empty();
    return j;
  };
  Json nodes = Json::array();
  for (const Node& n : state.nodes()) nodes.push_back(describe_node(node_json(n, opt.pool)));
  for (const std::string& address : state.invited(now)) {
    if (!state.node(address))
      nodes.push_back(describe_node({{"address", address},
                                     {"state", "invited"},
                                     {"ip", ""},
                                     {"registered_at", 0},
                                     {"heartbeat_at", 0},
                                     {"rejections", 0},
                                     {"last_rejection", ""},
                                     {"evicted_reason", ""}}));
  }

  Json training = Json::array();
  for (const StepMetrics& m : state.step_metrics(kTrainingSteps)) {
    training.push_back({{"step", m.step},
                        {"at", m.reported_at},
                        {"metrics", Json::parse(m.metrics, nullptr, /*allow_exceptions=*/false)}});
  }

  const Json run = status();
  const int64_t backlog = run.at("samples").at("validating").get<int64_t>();
  Json validators = Json::array();
  for (const ValidatorActivity& v : state.validator_activity(now - 60, now)) {
    validators.push_back({{"name", v.name},
                          {"accepted", v.accepted},
                          {"rejected", v.rejected},
                          {"samples", v.samples},
                          {"samples_last_minute", v.recent_samples},
                          {"last_verdict_at", v.last_decided_at},
                          {"holding", v.holding}});
  }
  Json relays = Json::array();
  {
    std::lock_guard lock(reports_mu);
    for (const auto& [name, report] : relay_reports) relays.push_back(report);
  }
  reply_json(res,
             {{"now", now},
              {"status", run},
              {"training", training},
              {"nodes", nodes},
              {"validation",
               {{"backlog_samples", backlog},
                {"backlog_steps", static_cast<double>(backlog) /
                                      static_cast<double>(std::max<int64_t>(1, opt.batch_size))},
                {"max_backlog_samples", run.at("max_backlog_samples")},
                {"validators_behind", run.at("validators_behind")},
                {"judged_samples_per_s", run.at("judged_samples_per_s")},
                {"validators", validators}}},
              {"relays", relays},
              {"ledger", verification_json(*audit_now, state, state.ledger_head())}});
}

void Server::Impl::dashboard_submissions(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "GET /dashboard/api/submissions";
  const std::string status = req.get_param_value("status");
  if (!status.empty() && std::find(submission_statuses().begin(), submission_statuses().end(),
                                   status) == submission_statuses().end()) {
    refuse(400, "malformed_request",
           fmt::format("unknown status '{}' ({})", status.substr(0, 32), where));
  }
  const int64_t limit = query_integer(req, "limit", 1, kMaxPage, kDefaultPage, where);
  const int64_t before =
      query_integer(req, "before_id", 0, INT32_MAX, int64_t{INT32_MAX} + 1, where);
  Json list = Json::array();
  const auto page = state.submissions_page(status, before, limit);
  for (const Submission& s : page) list.push_back(dashboard_submission_json(s));
  const bool more = static_cast<int64_t>(page.size()) == limit && page.back().id > 1;
  reply_json(res,
             {{"submissions", list}, {"next_before_id", more ? Json(page.back().id) : Json()}});
}

void Server::Impl::dashboard_submission(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "GET /dashboard/api/submissions/<id>";
  const auto id = parse_index(req.matches[1].str());
  if (!id) refuse(400, "malformed_request", fmt::format("the id is not a number ({})", where));
  const auto s = state.submission(*id);
  if (!s) refuse(404, "not_found", fmt::format("there is no submission {}", *id));
  Json j = dashboard_submission_json(*s);
  // A validator's reason is recorded as "validator <name>: <its findings>".
  std::string_view findings = s->reason;
  const std::string by = "validator " + s->validator + ": ";
  if (!s->validator.empty() && findings.starts_with(by)) findings.remove_prefix(by.size());
  Json checks = Json::array();
  for (const ReasonFinding& f : reason_findings(findings))
    checks.push_back({{"check", f.check}, {"finding", f.message}});
  j["checks"] = checks;
  const auto verified = audit.current(unix_seconds())->verification.verified;
  j["ledger"] = audit.naming(s->key.node_address, s->key.step, s->key.submission, verified);
  reply_json(res, j);
}

void Server::Impl::dashboard_ledger(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "GET /dashboard/api/ledger";
  const int64_t limit = query_integer(req, "limit", 1, kMaxPage, kDefaultPage, where);
  const int64_t before = query_integer(req, "before_seq", 0, INT32_MAX, INT64_MAX, where);
  const auto checked = audit.current(unix_seconds());
  Json entries = audit.page(before, limit, checked->verification.verified);
  Json next;
  if (static_cast<int64_t>(entries.size()) == limit && entries.back().at("seq").get<int64_t>() > 1)
    next = entries.back().at("seq");
  reply_json(res, {{"entries", entries},
                   {"next_before_seq", next},
                   {"verification", verification_json(*checked, state, state.ledger_head())}});
}

void Server::Impl::relay_report(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /relays";
  const Json body = parse_body(req, where);
  const std::string name = short_text_field(body, "name", where);
  const std::string url = short_text_field(body, "url", where);
  if (!body.contains("versions") || !body.at("versions").is_array() ||
      body.at("versions").size() > kMaxRelayVersions) {
    refuse(400, "malformed_request",
           fmt::format("field 'versions' must be a list of at most {} versions ({})",
                       kMaxRelayVersions, where));
  }
  Json versions = Json::array();
  for (const Json& v : body.at("versions")) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      refuse(400, "malformed_request",
             fmt::format("field 'versions' holds something other than a version ({})", where));
    }
    versions.push_back(v.get<int64_t>());
  }
  Json report = {
      {"name", name}, {"url", url}, {"versions", versions}, {"reported_at", unix_seconds()}};
  for (const char* counter : {"versions_pulled", "shards_pulled", "pull_failures"})
    report[counter] =
        body.contains(counter) ? integer_field(body, counter, 0, INT64_MAX, where) : 0;
  std::lock_guard lock(reports_mu);
  if (!relay_reports.contains(name) && relay_reports.size() >= kMaxRelayReports) {
    // Room for a new relay: the one silent the longest goes (relays hold the relay token, so
    // this bounds a buggy relay's names, not a stranger's).
    auto oldest = relay_reports.begin();
    for (auto it = relay_reports.begin(); it != relay_reports.end(); ++it)
      if (it->second.at("reported_at") < oldest->second.at("reported_at")) oldest = it;
    relay_reports.erase(oldest);
  }
  relay_reports[name] = std::move(report);
  reply_json(res, {{"recorded", true}});
}

}  // namespace trellis::orchestrator
