#include "orchestrator/client.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/hashing.h"
#include "common/http_service.h"
#include "common/json.h"
#include "common/request_signing.h"
#include "orchestrator/api.h"

namespace trellis::orchestrator {
namespace {

HttpReply get(httplib::Client& c, const std::string& path, size_t max_bytes = kMaxJsonAnswerBytes) {
  return http_send(c, "GET", path, {}, "", nullptr, max_bytes);
}

HttpReply post(httplib::Client& c, const std::string& path, std::string json_body,
               httplib::Headers headers = {}) {
  return http_send(c, "POST", path, std::move(headers), std::move(json_body), "application/json");
}

// Attempts of an upload the orchestrator answers 503 busy, a second apart.
constexpr int kBusyRetries = 60;

// One object of an orchestrator's answer, read field by field with json_required's checks. A node
// or operator may point at any orchestrator, so its answers are hostile input: a missing field, a
// wrong type or a number the field's type does not hold exactly (1e41 for a step, undefined
// behaviour in nlohmann's own conversion) is an Error naming the field and the endpoint.
class Answer {
 public:
  Answer(const Json& j, const std::string& where) : j_(j), where_(where) {}

  template <typename T>
  T get(const char* key) const {
    return json_required<T>(j_, key, where_);
  }
  bool is_null(const char* key) const { return field(key).is_null(); }
  Answer object(const char* key) const {
    const Json& v = field(key);
    if (!v.is_object()) fail(where_, "field '{}' must be an object, not {}", key, v.type_name());
    return Answer(v, where_);
  }
  // The field's elements, each an object.
  std::vector<Answer> objects(const char* key) const {
    const Json& v = field(key);
    if (!v.is_array()) fail(where_, "field '{}' must be an array, not {}", key, v.type_name());
    std::vector<Answer> out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_object()) fail(where_, "field '{}': element {} is not an object", key, i);
      out.emplace_back(v[i], where_);
    }
    return out;
  }

 private:
  const Json& field(const char* key) const {
    if (!j_.is_object() || !j_.contains(key)) fail(where_, "missing field '{}'", key);
    return j_.at(key);
  }

  const Json& j_;
  std::string where_;
};

// A task as the API writes it (GET /tasks, the heartbeat's answer).
Task task_of(const Answer& t) {
  return Task{t.get<int64_t>("id"),         t.get<std::string>("role"),
              t.get<std::string>("config"), t.get<std::string>("node"),
              t.get<double>("created_at"),  t.get<double>("assigned_at")};
}

}  // namespace

std::string client_url(const Config& config) {
  const auto url = config.get<std::string>("orchestrator.url");
  if (!url.empty()) return url;
  return fmt::format("http://{}:{}", config.get<std::string>("orchestrator.host"),
                     config.get<int64_t>("orchestrator.port"));
}

Client::Client(std::string base_url, std::string token, double timeout_s)
    : base_url_(std::move(base_url)), token_(std::move(token)), timeout_s_(timeout_s) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
}

Client::~Client() = default;

namespace {

httplib::Client connect(const std::string& base_url, const std::string& token, double timeout_s) {
  httplib::Client c = http_client(base_url, timeout_s);
  if (!token.empty()) c.set_bearer_token_auth(token);
  return c;
}

Json get_json(const std::string& base, const std::string& token, double timeout_s,
              const std::string& path) {
  auto c = connect(base, token, timeout_s);
  auto res = get(c, path);
  if (!res.ok()) fail(base + path, "request failed: {}", res.reason());
  return parse_json(res.body, base + path);
}

}  // namespace

const std::string& Client::run_id() {
  if (run_id_.empty()) run_id_ = status().run_id;
  return run_id_;
}

Status Client::status() {
  const std::string where = base_url_ + "/status";
  const Json body = get_json(base_url_, token_, timeout_s_, "/status");
  const Answer j(body, where);
  Status s;
  s.run_id = j.get<std::string>("run_id");
  s.step = j.get<int64_t>("step");
  s.policy_version = j.get<int64_t>("policy_version");
  s.trainer_public_key = j.get<std::string>("trainer_public_key");
  s.steps = j.get<int64_t>("steps");
  s.async_level = j.get<int64_t>("async_level");
  s.batch_size = j.get<int64_t>("batch_size");
  s.group_size = j.get<int64_t>("group_size");
  s.assigned = j.get<int64_t>("assigned");
  s.pending = j.get<int64_t>("pending");
  s.validating = j.get<int64_t>("validating");
  s.accepted = j.get<int64_t>("accepted");
  s.rejected = j.get<int64_t>("rejected");
  s.dropped = j.get<int64_t>("dropped");
  const Answer samples = j.object("samples");
  s.generated_samples = samples.get<int64_t>("generated");
  s.validating_samples = samples.get<int64_t>("validating");
  s.accepted_samples = samples.get<int64_t>("accepted");
  s.rejected_samples = samples.get<int64_t>("rejected");
  s.dropped_samples = samples.get<int64_t>("dropped");
  s.max_backlog_samples = j.get<int64_t>("max_backlog_samples");
  s.validators_behind = j.get<bool>("validators_behind");
  s.judged_samples_per_s = j.get<double>("judged_samples_per_s");
  s.rollout_tokens_per_s = j.get<double>("rollout_tokens_per_s");
  s.done = j.get<bool>("done");
  return s;
}

WorkAnswer Client::request_work(const Identity& node, int64_t held_version, int64_t max_groups) {
  const std::string path = "/work";
  auto c = connect(base_url_, token_, timeout_s_);
  const std::string body = Json{
      {"node_address", node.address()},
      {"policy_version", held_version},
      {"groups", max_groups}}.dump();
  auto res = post(c, path, body, signed_headers(node, run_id(), "POST", path, sha256_hex(body)));
  if (!res.ok()) fail(base_url_ + path, "asking for work failed: {}", res.reason());
  const std::string where = base_url_ + path;
  const Json body_json = parse_json(res.body, where);
  const Answer j(body_json, where);
  WorkAnswer out;
  out.wait_reason = j.get<std::string>("reason");
  if (!j.is_null("work")) {
    const Answer w = j.object("work");
    out.work = Assignment{w.get<int64_t>("step"), w.get<int64_t>("submission"),
                          w.get<int64_t>("groups"), w.get<double>("expires")};
  }
  return out;
}

std::string Client::submit(const Identity& node, int64_t step, int64_t submission,
                           std::string_view file_bytes) {
  const std::string where =
      fmt::format("{}/submissions (step {}, submission {})", base_url_, step, submission);
  auto c = connect(base_url_, token_, timeout_s_);
  const std::string file_sha256 = sha256_hex(file_bytes);  // declared, and signed with the PUT
  const std::string body = Json{
      {"node_address", node.address()},
      {"step", step},
      {"submission", submission},
      {"sha256", file_sha256},
      {"size",
       file_bytes.size()}}.dump();
  auto res = post(c, "/submissions", body,
                  signed_headers(node, run_id(), "POST", "/submissions", sha256_hex(body)));
  if (res.status == 409 && res.code() == "dropped") return "dropped";
  if (!res.ok()) fail(where, "upload refused: {}", res.reason());
  const std::string url = Answer(parse_json(res.body, where), where).get<std::string>("upload_url");
  // A busy orchestrator (503 busy: as many uploads as it takes at once) is asked again, each time
  // with a fresh signature, for up to a minute.
  const auto put_file = [&] {
    return http_send(c, "PUT", url, signed_headers(node, run_id(), "PUT", url, file_sha256),
                     std::string(file_bytes), "application/vnd.apache.parquet");
  };
  auto put = put_file();
  for (int attempt = 1; put.status == 503 && put.code() == "busy" && attempt <= kBusyRetries;
       ++attempt) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    put = put_file();
  }
  if (put.status == 409 && put.code() == "dropped") return "dropped";
  if (put.status != 200 && put.status != 202) {
    fail(where, "upload rejected: {}", put.reason());
  }
  return Answer(parse_json(put.body, where), where).get<std::string>("status");
}

std::vector<AcceptedFile> Client::accepted(int64_t step) {
  const std::string path = fmt::format("/steps/{}/accepted", step);
  const std::string where = base_url_ + path;
  const Json body = get_json(base_url_, token_, timeout_s_, path);
  std::vector<AcceptedFile> files;
  for (const Answer& f : Answer(body, where).objects("files")) {
    AcceptedFile a;
    a.name = f.get<std::string>("name");
    a.node_address = f.get<std::string>("node_address");
    a.submission = f.get<int64_t>("submission");
    a.sha256 = f.get<std::string>("sha256");
    a.size = f.get<int64_t>("size");
    a.samples = f.get<int64_t>("samples");
    a.signal_samples = f.get<int64_t>("signal_samples");
    files.push_back(std::move(a));
  }
  return files;
}

std::string Client::download(int64_t step, const AcceptedFile& file) {
  const std::string path = fmt::format("/rollouts/step_{}/{}", step, file.name);
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = get(c, path, static_cast<size_t>(std::max<int64_t>(file.size, 0)));
  if (!res.ok()) fail(base_url_ + path, "download failed: {}", res.reason());
  return std::move(res.body);
}

void Client::publish_version(int64_t version, const std::string& public_key) {
  auto c = connect(base_url_, token_, timeout_s_);
  Json body{{"version", version}};
  if (!public_key.empty()) body["public_key"] = public_key;
  auto res = post(c, "/trainer/version", body.dump());
  if (!res.ok())
    fail(base_url_ + "/trainer/version", "publishing version {} failed: {}", version, res.reason());
}

void Client::report_metrics(int64_t step, const Json& metrics) {
  auto c = connect(base_url_, token_, timeout_s_);
  const Json body{{"step", step}, {"metrics", metrics}};
  auto res = post(c, "/trainer/metrics", body.dump());
  if (!res.ok())
    fail(base_url_ + "/trainer/metrics", "reporting step {} failed: {}", step, res.reason());
}

void Client::register_node(const Identity& node, const std::string& invite) {
  Json j{{"address", node.address()}};
  if (!invite.empty()) j["invite"] = invite;
  const std::string body = j.dump();
  auto c = connect(base_url_, token_, timeout_s_);
  auto res =
      post(c, "/nodes", body, signed_headers(node, run_id(), "POST", "/nodes", sha256_hex(body)));
  if (!res.ok()) {
    fail(base_url_ + "/nodes", "registering node {} failed: {}", node.address(), res.reason());
  }
}

Client::Beat Client::heartbeat(const Identity& node, const std::string& state) {
  Json j{{"node_address", node.address()}};
  if (!state.empty()) j["state"] = state;
  const std::string body = j.dump();
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = post(c, "/heartbeat", body,
                  signed_headers(node, run_id(), "POST", "/heartbeat", sha256_hex(body)));
  if (res.status == 403) return {.refused = res.code(), .why = res.reason()};
  if (!res.ok()) {
    fail(base_url_ + "/heartbeat", "heartbeat of node {} refused: {}", node.address(),
         res.reason());
  }
  const std::string where = base_url_ + "/heartbeat";
  const Json body_json = parse_json(res.body, where);
  const Answer a(body_json, where);
  Beat beat;
  beat.interval_s = a.get<double>("interval_s");
  if (!a.is_null("task")) beat.task = task_of(a.object("task"));
  return beat;
}

std::string Client::node_logs(const std::string& address, int64_t lines) {
  const std::string path = fmt::format("/nodes/{}/logs?lines={}", address, lines);
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = get(c, path);
  if (!res.ok()) fail(base_url_ + path, "no logs: {}", res.reason());
  return res.body;
}

std::vector<Task> Client::tasks() {
  const std::string where = base_url_ + "/tasks";
  const Json body = get_json(base_url_, token_, timeout_s_, "/tasks");
  std::vector<Task> out;
  for (const Answer& t : Answer(body, where).objects("tasks")) out.push_back(task_of(t));
  return out;
}

int64_t Client::create_task(const std::string& role, const std::string& config,
                            const std::string& node) {
  Json j{{"role", role}, {"config", config}};
  if (!node.empty()) j["node"] = node;
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = post(c, "/tasks", j.dump());
  if (!res.ok()) fail(base_url_ + "/tasks", "task refused: {}", res.reason());
  const std::string where = base_url_ + "/tasks";
  return Answer(parse_json(res.body, where), where).get<int64_t>("id");
}

void Client::evict(const std::string& address, const std::string& why) {
  const std::string path = "/nodes/" + address + "/evict";
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = post(c, path, Json{{"reason", why}}.dump());
  if (!res.ok()) fail(base_url_ + path, "eviction failed: {}", res.reason());
}

int64_t Client::deposit_stake(const std::string& address, int64_t amount) {
  const std::string path = "/nodes/" + address + "/stake";
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = post(c, path, Json{{"amount", amount}}.dump());
  if (!res.ok()) fail(base_url_ + path, "deposit refused: {}", res.reason());
  const std::string where = base_url_ + path;
  return Answer(parse_json(res.body, where), where).get<int64_t>("stake");
}

void Client::approve(const std::string& address) {
  const std::string path = "/nodes/" + address + "/approve";
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = post(c, path, "");
  if (!res.ok()) fail(base_url_ + path, "approval refused: {}", res.reason());
}

Allowlist Client::allowlist() {
  const std::string where = base_url_ + "/allowlist";
  const Json body = get_json(base_url_, token_, timeout_s_, "/allowlist");
  const Answer j(body, where);
  Allowlist a;
  a.revision = j.get<int64_t>("revision");
  a.ips = j.get<std::vector<std::string>>("ips");
  return a;
}

std::vector<Node> Client::nodes() {
  const std::string where = base_url_ + "/nodes";
  const Json body = get_json(base_url_, token_, timeout_s_, "/nodes");
  std::vector<Node> out;
  for (const Answer& n : Answer(body, where).objects("nodes")) {
    Node i;
    i.address = n.get<std::string>("address");
    i.ip = n.get<std::string>("ip");
    i.registered_at = n.get<double>("registered_at");
    i.last_seen = n.get<double>("last_seen");
    i.signed_at = n.get<int64_t>("signed_at");
    i.evicted = n.get<bool>("evicted");
    i.evicted_reason = n.get<std::string>("evicted_reason");
    i.evicted_at = n.get<double>("evicted_at");
    i.rejections = n.get<int64_t>("rejections");
    i.last_rejection = n.get<std::string>("last_rejection");
    i.heartbeat_at = n.get<double>("heartbeat_at");
    out.push_back(std::move(i));
  }
  return out;
}

std::vector<Submission> Client::submissions(const std::string& status,
                                            std::optional<int64_t> step) {
  httplib::Params params;
  if (!status.empty()) params.emplace("status", status);
  if (step) params.emplace("step", std::to_string(*step));
  const std::string path = httplib::append_query_params("/submissions", params);
  const std::string where = base_url_ + path;
  const Json body = get_json(base_url_, token_, timeout_s_, path);
  std::vector<Submission> out;
  for (const Answer& e : Answer(body, where).objects("submissions")) {
    Submission s;
    s.id = e.get<int64_t>("id");
    s.key.step = e.get<int64_t>("step");
    s.key.node_address = e.get<std::string>("node_address");
    s.key.submission = e.get<int64_t>("submission");
    s.status = e.get<std::string>("status");
    s.reason = e.get<std::string>("reason");
    s.sha256 = e.get<std::string>("sha256");
    s.size = e.get<int64_t>("size");
    s.counts.samples = e.get<int64_t>("samples");
    s.counts.signal_samples = e.get<int64_t>("signal_samples");
    s.created_at = e.get<double>("created_at");
    s.uploaded_at = e.get<double>("uploaded_at");
    s.decided_at = e.get<double>("decided_at");
    s.validator = e.get<std::string>("validator");
    s.claimed_by = e.get<std::string>("claimed_by");
    s.lease_expires = e.get<double>("lease_expires");
    s.groups = e.get<int64_t>("groups");
    s.work_expires = e.get<double>("work_expires");
    out.push_back(std::move(s));
  }
  return out;
}

ClaimResult Client::claim_validation(const std::string& validator_name) {
  const std::string path = "/validation/claim";
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = post(c, path, Json{{"validator", validator_name}}.dump());
  if (!res.ok()) fail(base_url_ + path, "claim failed: {}", res.reason());
  const std::string where = base_url_ + path;
  const Json body = parse_json(res.body, where);
  const Answer j(body, where);
  ClaimResult out;
  out.policy_version = j.get<int64_t>("policy_version");
  out.async_level = j.get<int64_t>("async_level");
  if (!j.is_null("submission")) {
    const Answer s = j.object("submission");
    ValidationClaim v;
    v.key.step = s.get<int64_t>("step");
    v.key.node_address = s.get<std::string>("node_address");
    v.key.submission = s.get<int64_t>("submission");
    v.sha256 = s.get<std::string>("sha256");
    v.size = s.get<int64_t>("size");
    v.samples = s.get<int64_t>("samples");
    v.signal_samples = s.get<int64_t>("signal_samples");
    v.uploaded_at = s.get<double>("uploaded_at");
    v.lease_expires = s.get<double>("lease_expires");
    v.file = s.get<std::string>("file");
    out.claim = std::move(v);
  }
  return out;
}

std::string Client::download_for_validation(const ValidationClaim& claim) {
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = get(c, claim.file, static_cast<size_t>(std::max<int64_t>(claim.size, 0)));
  if (!res.ok()) {
    fail(base_url_ + claim.file, "download for validation failed: {}", res.reason());
  }
  return std::move(res.body);
}

std::string Client::post_verdict(const SubmissionKey& key, bool accept, const std::string& why,
                                 const std::string& validator_name, int64_t checked_samples,
                                 const std::optional<ledger::Statement>& signed_verdict) {
  const std::string path = "/validation/verdict";
  Json body{{"step", key.step},
            {"node_address", key.node_address},
            {"submission", key.submission},
            {"accept", accept},
            {"reason", why},
            {"validator", validator_name}};
  if (checked_samples >= 0) body["checked_samples"] = checked_samples;
  if (signed_verdict) {
    body["validator_address"] = signed_verdict->author;
    body["ledger_time_ms"] = signed_verdict->time_ms;
    body["ledger_signature"] = signed_verdict->signature;
  }
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = post(c, path, body.dump());
  const std::string where = fmt::format("{}{} (step {} submission {} of node {})", base_url_, path,
                                        key.step, key.submission, key.node_address);
  if (!res.ok()) fail(where, "verdict refused: {}", res.reason());
  return Answer(parse_json(res.body, where), where).get<std::string>("status");
}

}  // namespace trellis::orchestrator
