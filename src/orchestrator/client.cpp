#include "orchestrator/client.h"

#include <httplib.h>

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

// The server's reason from a JSON {"error": ...} body, else the body itself.
std::string reason(const httplib::Result& res) {
  if (!res) return httplib::to_string(res.error());
  try {
    return Json::parse(res->body).at("error").get<std::string>();
  } catch (...) {
    return fmt::format("HTTP {}: {}", res->status, res->body.substr(0, 200));
  }
}

// Attempts of an upload the orchestrator answers 503 busy, a second apart.
constexpr int kBusyRetries = 60;

// The refusal's code ({"code": ...}; "" without one).
std::string code(const httplib::Result& res) {
  try {
    return Json::parse(res->body).value("code", "");
  } catch (...) {
    return "";
  }
}

// A task as the API writes it (GET /tasks, the heartbeat's answer).
Task task_of(const Json& t) {
  return Task{t.at("id").get<int64_t>(),         t.at("role").get<std::string>(),
              t.at("config").get<std::string>(), t.at("node").get<std::string>(),
              t.at("created_at").get<double>(),  t.at("assigned_at").get<double>()};
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
  auto res = c.Get(path);
  if (!res || res->status != 200) fail(base + path, "request failed: {}", reason(res));
  try {
    return Json::parse(res->body);
  } catch (const std::exception& e) {
    fail(base + path, "the orchestrator's answer is not JSON: {}", e.what());
  }
}

}  // namespace

const std::string& Client::run_id() {
  if (run_id_.empty()) run_id_ = status().run_id;
  return run_id_;
}

Status Client::status() {
  const Json j = get_json(base_url_, token_, timeout_s_, "/status");
  Status s;
  try {
    s.run_id = j.at("run_id").get<std::string>();
    s.step = j.at("step").get<int64_t>();
    s.policy_version = j.at("policy_version").get<int64_t>();
    s.trainer_public_key = j.at("trainer_public_key").get<std::string>();
    s.steps = j.at("steps").get<int64_t>();
    s.async_level = j.at("async_level").get<int64_t>();
    s.batch_size = j.at("batch_size").get<int64_t>();
    s.group_size = j.at("group_size").get<int64_t>();
    s.assigned = j.at("assigned").get<int64_t>();
    s.pending = j.at("pending").get<int64_t>();
    s.validating = j.at("validating").get<int64_t>();
    s.accepted = j.at("accepted").get<int64_t>();
    s.rejected = j.at("rejected").get<int64_t>();
    s.dropped = j.at("dropped").get<int64_t>();
    const Json& samples = j.at("samples");
    s.generated_samples = samples.at("generated").get<int64_t>();
    s.validating_samples = samples.at("validating").get<int64_t>();
    s.accepted_samples = samples.at("accepted").get<int64_t>();
    s.rejected_samples = samples.at("rejected").get<int64_t>();
    s.dropped_samples = samples.at("dropped").get<int64_t>();
    s.max_backlog_samples = j.at("max_backlog_samples").get<int64_t>();
    s.validators_behind = j.at("validators_behind").get<bool>();
    s.judged_samples_per_s = j.at("judged_samples_per_s").get<double>();
    s.rollout_tokens_per_s = j.at("rollout_tokens_per_s").get<double>();
    s.done = j.at("done").get<bool>();
  } catch (const Json::exception& e) {
    fail(base_url_ + "/status", "unexpected answer: {}", e.what());
  }
  return s;
}

WorkAnswer Client::request_work(const Identity& node, int64_t held_version, int64_t max_groups) {
  const std::string path = "/work";
  auto c = connect(base_url_, token_, timeout_s_);
  const std::string body = Json{
      {"node_address", node.address()},
      {"policy_version", held_version},
      {"groups", max_groups}}.dump();
  auto res = c.Post(path, signed_headers(node, run_id(), "POST", path, sha256_hex(body)), body,
                    "application/json");
  if (!res || res->status != 200) fail(base_url_ + path, "asking for work failed: {}", reason(res));
  WorkAnswer out;
  try {
    const Json j = Json::parse(res->body);
    out.wait_reason = j.at("reason").get<std::string>();
    const Json& w = j.at("work");
    if (!w.is_null()) {
      out.work = Assignment{w.at("step").get<int64_t>(), w.at("submission").get<int64_t>(),
                            w.at("groups").get<int64_t>(), w.at("expires").get<double>()};
    }
  } catch (const std::exception& e) {
    fail(base_url_ + path, "unexpected answer: {}", e.what());
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
  auto res = c.Post("/submissions",
                    signed_headers(node, run_id(), "POST", "/submissions", sha256_hex(body)), body,
                    "application/json");
  if (res && res->status == 409 && code(res) == "dropped") return "dropped";
  if (!res || res->status != 200) fail(where, "upload refused: {}", reason(res));
  std::string url;
  try {
    url = Json::parse(res->body).at("upload_url").get<std::string>();
  } catch (const std::exception& e) {
    fail(where, "no upload_url in the answer: {}", e.what());
  }
  // A busy orchestrator (503 busy: as many uploads as it takes at once) is asked again, each time
  // with a fresh signature, for up to a minute.
  const auto send = [&] {
    return c.Put(url, signed_headers(node, run_id(), "PUT", url, file_sha256), file_bytes.data(),
                 file_bytes.size(), "application/vnd.apache.parquet");
  };
  auto put = send();
  for (int attempt = 1; put && put->status == 503 && code(put) == "busy" && attempt <= kBusyRetries;
       ++attempt) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    put = send();
  }
  if (put && put->status == 409 && code(put) == "dropped") return "dropped";
  if (!put || (put->status != 200 && put->status != 202)) {
    fail(where, "upload rejected: {}", reason(put));
  }
  try {
    return Json::parse(put->body).at("status").get<std::string>();
  } catch (const std::exception& e) {
    fail(where, "no status in the upload's answer: {}", e.what());
  }
}

std::vector<AcceptedFile> Client::accepted(int64_t step) {
  const std::string path = fmt::format("/steps/{}/accepted", step);
  const Json j = get_json(base_url_, token_, timeout_s_, path);
  std::vector<AcceptedFile> files;
  try {
    for (const auto& f : j.at("files")) {
      AcceptedFile a;
      a.name = f.at("name").get<std::string>();
      a.node_address = f.at("node_address").get<std::string>();
      a.submission = f.at("submission").get<int64_t>();
      a.sha256 = f.at("sha256").get<std::string>();
      a.samples = f.at("samples").get<int64_t>();
      a.signal_samples = f.at("signal_samples").get<int64_t>();
      files.push_back(std::move(a));
    }
  } catch (const Json::exception& e) {
    fail(base_url_ + path, "unexpected answer: {}", e.what());
  }
  return files;
}

std::string Client::download(int64_t step, const std::string& name) {
  const std::string path = fmt::format("/rollouts/step_{}/{}", step, name);
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = c.Get(path);
  if (!res || res->status != 200) fail(base_url_ + path, "download failed: {}", reason(res));
  return std::move(res->body);
}

void Client::publish_version(int64_t version, const std::string& public_key) {
  auto c = connect(base_url_, token_, timeout_s_);
  Json body{{"version", version}};
  if (!public_key.empty()) body["public_key"] = public_key;
  auto res = c.Post("/trainer/version", body.dump(), "application/json");
  if (!res || res->status != 200)
    fail(base_url_ + "/trainer/version", "publishing version {} failed: {}", version, reason(res));
}

void Client::report_metrics(int64_t step, const Json& metrics) {
  auto c = connect(base_url_, token_, timeout_s_);
  const Json body{{"step", step}, {"metrics", metrics}};
  auto res = c.Post("/trainer/metrics", body.dump(), "application/json");
  if (!res || res->status != 200)
    fail(base_url_ + "/trainer/metrics", "reporting step {} failed: {}", step, reason(res));
}

void Client::register_node(const Identity& node, const std::string& invite) {
  Json j{{"address", node.address()}};
  if (!invite.empty()) j["invite"] = invite;
  const std::string body = j.dump();
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = c.Post("/nodes", signed_headers(node, run_id(), "POST", "/nodes", sha256_hex(body)),
                    body, "application/json");
  if (!res || res->status != 200) {
    fail(base_url_ + "/nodes", "registering node {} failed: {}", node.address(), reason(res));
  }
}

Client::Beat Client::heartbeat(const Identity& node, const std::string& state) {
  Json j{{"node_address", node.address()}};
  if (!state.empty()) j["state"] = state;
  const std::string body = j.dump();
  auto c = connect(base_url_, token_, timeout_s_);
  auto res =
      c.Post("/heartbeat", signed_headers(node, run_id(), "POST", "/heartbeat", sha256_hex(body)),
             body, "application/json");
  if (res && res->status == 403) return {.refused = code(res), .why = reason(res)};
  if (!res || res->status != 200) {
    fail(base_url_ + "/heartbeat", "heartbeat of node {} refused: {}", node.address(), reason(res));
  }
  try {
    const Json a = Json::parse(res->body);
    Beat beat;
    beat.interval_s = a.at("interval_s").get<double>();
    if (!a.at("task").is_null()) beat.task = task_of(a["task"]);
    return beat;
  } catch (const std::exception& e) {
    fail(base_url_ + "/heartbeat", "unexpected answer: {}", e.what());
  }
}

std::string Client::node_logs(const std::string& address, int64_t lines) {
  const std::string path = fmt::format("/nodes/{}/logs?lines={}", address, lines);
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = c.Get(path);
  if (!res || res->status != 200) fail(base_url_ + path, "no logs: {}", reason(res));
  return res->body;
}

std::vector<Task> Client::tasks() {
  const Json j = get_json(base_url_, token_, timeout_s_, "/tasks");
  std::vector<Task> out;
  try {
    for (const Json& t : j.at("tasks")) out.push_back(task_of(t));
  } catch (const Json::exception& e) {
    fail(base_url_ + "/tasks", "unexpected answer: {}", e.what());
  }
  return out;
}

int64_t Client::create_task(const std::string& role, const std::string& config,
                            const std::string& node) {
  Json j{{"role", role}, {"config", config}};
  if (!node.empty()) j["node"] = node;
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = c.Post("/tasks", j.dump(), "application/json");
  if (!res || res->status != 200) fail(base_url_ + "/tasks", "task refused: {}", reason(res));
  try {
    return Json::parse(res->body).at("id").get<int64_t>();
  } catch (const std::exception& e) {
    fail(base_url_ + "/tasks", "no id in the answer: {}", e.what());
  }
}

void Client::evict(const std::string& address, const std::string& why) {
  const std::string path = "/nodes/" + address + "/evict";
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = c.Post(path, Json{{"reason", why}}.dump(), "application/json");
  if (!res || res->status != 200) fail(base_url_ + path, "eviction failed: {}", reason(res));
}

int64_t Client::deposit_stake(const std::string& address, int64_t amount) {
  const std::string path = "/nodes/" + address + "/stake";
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = c.Post(path, Json{{"amount", amount}}.dump(), "application/json");
  if (!res || res->status != 200) fail(base_url_ + path, "deposit refused: {}", reason(res));
  try {
    return Json::parse(res->body).at("stake").get<int64_t>();
  } catch (const std::exception& e) {
    fail(base_url_ + path, "no stake in the answer: {}", e.what());
  }
}

void Client::approve(const std::string& address) {
  const std::string path = "/nodes/" + address + "/approve";
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = c.Post(path, "", "application/json");
  if (!res || res->status != 200) fail(base_url_ + path, "approval refused: {}", reason(res));
}

Allowlist Client::allowlist() {
  const Json j = get_json(base_url_, token_, timeout_s_, "/allowlist");
  Allowlist a;
  try {
    a.revision = j.at("revision").get<int64_t>();
    a.ips = j.at("ips").get<std::vector<std::string>>();
  } catch (const Json::exception& e) {
    fail(base_url_ + "/allowlist", "unexpected answer: {}", e.what());
  }
  return a;
}

std::vector<Node> Client::nodes() {
  const Json j = get_json(base_url_, token_, timeout_s_, "/nodes");
  std::vector<Node> out;
  try {
    for (const auto& n : j.at("nodes")) {
      Node i;
      i.address = n.at("address").get<std::string>();
      i.ip = n.at("ip").get<std::string>();
      i.registered_at = n.at("registered_at").get<double>();
      i.last_seen = n.at("last_seen").get<double>();
      i.signed_at = n.at("signed_at").get<int64_t>();
      i.evicted = n.at("evicted").get<bool>();
      i.evicted_reason = n.at("evicted_reason").get<std::string>();
      i.evicted_at = n.at("evicted_at").get<double>();
      i.rejections = n.at("rejections").get<int64_t>();
      i.last_rejection = n.at("last_rejection").get<std::string>();
      i.heartbeat_at = n.at("heartbeat_at").get<double>();
      out.push_back(std::move(i));
    }
  } catch (const Json::exception& e) {
    fail(base_url_ + "/nodes", "unexpected answer: {}", e.what());
  }
  return out;
}

std::vector<Submission> Client::submissions(const std::string& status,
                                            std::optional<int64_t> step) {
  httplib::Params params;
  if (!status.empty()) params.emplace("status", status);
  if (step) params.emplace("step", std::to_string(*step));
  const std::string path = httplib::append_query_params("/submissions", params);
  const Json j = get_json(base_url_, token_, timeout_s_, path);
  std::vector<Submission> out;
  try {
    for (const auto& e : j.at("submissions")) {
      Submission s;
      s.id = e.at("id").get<int64_t>();
      s.key.step = e.at("step").get<int64_t>();
      s.key.node_address = e.at("node_address").get<std::string>();
      s.key.submission = e.at("submission").get<int64_t>();
      s.status = e.at("status").get<std::string>();
      s.reason = e.at("reason").get<std::string>();
      s.sha256 = e.at("sha256").get<std::string>();
      s.size = e.at("size").get<int64_t>();
      s.counts.samples = e.at("samples").get<int64_t>();
      s.counts.signal_samples = e.at("signal_samples").get<int64_t>();
      s.created_at = e.at("created_at").get<double>();
      s.uploaded_at = e.at("uploaded_at").get<double>();
      s.decided_at = e.at("decided_at").get<double>();
      s.validator = e.at("validator").get<std::string>();
      s.claimed_by = e.at("claimed_by").get<std::string>();
      s.lease_expires = e.at("lease_expires").get<double>();
      s.groups = e.at("groups").get<int64_t>();
      s.work_expires = e.at("work_expires").get<double>();
      out.push_back(std::move(s));
    }
  } catch (const Json::exception& e) {
    fail(base_url_ + path, "unexpected answer: {}", e.what());
  }
  return out;
}

ClaimResult Client::claim_validation(const std::string& validator_name) {
  const std::string path = "/validation/claim";
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = c.Post(path, Json{{"validator", validator_name}}.dump(), "application/json");
  if (!res || res->status != 200) fail(base_url_ + path, "claim failed: {}", reason(res));
  ClaimResult out;
  try {
    const Json j = Json::parse(res->body);
    out.policy_version = j.at("policy_version").get<int64_t>();
    out.async_level = j.at("async_level").get<int64_t>();
    const Json& s = j.at("submission");
    if (!s.is_null()) {
      ValidationClaim v;
      v.key.step = s.at("step").get<int64_t>();
      v.key.node_address = s.at("node_address").get<std::string>();
      v.key.submission = s.at("submission").get<int64_t>();
      v.sha256 = s.at("sha256").get<std::string>();
      v.size = s.at("size").get<int64_t>();
      v.samples = s.at("samples").get<int64_t>();
      v.signal_samples = s.at("signal_samples").get<int64_t>();
      v.uploaded_at = s.at("uploaded_at").get<double>();
      v.lease_expires = s.at("lease_expires").get<double>();
      v.file = s.at("file").get<std::string>();
      out.claim = std::move(v);
    }
  } catch (const std::exception& e) {
    fail(base_url_ + path, "unexpected answer: {}", e.what());
  }
  return out;
}

std::string Client::download_for_validation(const ValidationClaim& claim) {
  auto c = connect(base_url_, token_, timeout_s_);
  auto res = c.Get(claim.file);
  if (!res || res->status != 200) {
    fail(base_url_ + claim.file, "download for validation failed: {}", reason(res));
  }
  return std::move(res->body);
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
  auto res = c.Post(path, body.dump(), "application/json");
  const std::string where = fmt::format("{}{} (step {} submission {} of node {})", base_url_, path,
                                        key.step, key.submission, key.node_address);
  if (!res || res->status != 200) fail(where, "verdict refused: {}", reason(res));
  try {
    return Json::parse(res->body).at("status").get<std::string>();
  } catch (const std::exception& e) {
    fail(where, "no status in the answer: {}", e.what());
  }
}

}  // namespace trellis::orchestrator
