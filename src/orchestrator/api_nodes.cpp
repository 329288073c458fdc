// The node registry's routes: registration (POST /nodes), heartbeats, the pool owner's stake
// deposits, approvals and evictions, the node listing and the relays' IP allowlist; and what
// every node request checks of its sender (require_member).

#include "orchestrator/api_impl.h"

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/hashing.h"
#include "common/http_service.h"
#include "common/json.h"
#include "common/logging.h"
#include "orchestrator/endpoint_request.h"
#include "rollout/store.h"

namespace trellis::orchestrator {

using namespace api_detail;

namespace {

// What GET /nodes/<address>/logs asks of an agent, and reads of its answer.
constexpr int64_t kMaxLogLines = 10'000;
constexpr int64_t kMaxLogBytes = 1 << 20;
constexpr double kLogsDeadlineS = 10;

constexpr size_t kMaxReasonBytes = 1000;  // of an eviction's reason

}  // namespace

Json api_detail::node_json(const Node& n, const PoolPolicy& policy) {
  return {{"address", n.address},
          {"state", node_state(n, unix_seconds(), policy)},
          {"heartbeat_at", n.heartbeat_at},
          {"ip", n.ip},
          {"registered_at", n.registered_at},
          {"last_seen", n.last_seen},
          {"signed_at", n.signed_at},
          {"evicted", n.evicted},
          {"evicted_reason", n.evicted_reason},
          {"evicted_at", n.evicted_at},
          {"rejections", n.rejections},
          {"last_rejection", n.last_rejection}};
}

void Server::Impl::require_member(const std::string& address) {
  const auto n = state.node(address);
  if (!n) {
    refuse(403, "not_registered",
           fmt::format("node {} is not registered: register with POST /nodes first", address));
  }
  if (n->evicted) refuse(403, "evicted", eviction_message(*n));
  if (!node_is_live(*n, unix_seconds(), opt.pool)) refuse(403, "not_registered", dead_message(*n));
  // Admitted when it registered, but a slash may have left its stake short since.
  if (std::string why = state.admission_problem(address); !why.empty()) {
    refuse(403, "not_admitted", why);
  }
}

void Server::Impl::register_node(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /nodes";
  const Json body = parse_body(req, where);
  const std::string address = address_field(body, "address", where);
  const int64_t timestamp = require_signed_by(req, address, sha256_hex(req.body), where);
  std::string invite;  // the nonce of the invite the node accepted, if it was invited
  if (body.contains("invite")) {
    invite = string_field(body, "invite", where);
    if (invite.size() != 32 || invite.find_first_not_of("0123456789abcdef") != std::string::npos)
      refuse(400, "malformed_request",
             fmt::format("field 'invite' must be an invite's nonce: 32 hex digits ({})", where));
  }
  const std::string ip = client_ip(req, opt.trusted_proxies);
  const Registration r = state.register_node(address, ip, timestamp, unix_seconds(), invite);
  if (r.outcome == Registration::kEvicted) refuse(403, "evicted", eviction_message(r.node));
  if (r.outcome == Registration::kNotAdmitted) refuse(403, "not_admitted", r.why);
  if (r.outcome == Registration::kBadInvite) refuse(403, "bad_invite", r.why);
  if (r.outcome == Registration::kInviteRequired) refuse(403, "invite_required", r.why);
  if (r.outcome == Registration::kIpFull) refuse(403, "ip_full", r.why);
  if (r.outcome == Registration::kReplayed) {
    refuse(401, "registration_replayed",
           fmt::format("node {}: a registration signed at {} is already recorded; this one is "
                       "signed at {} (a replayed or reordered request: sign a fresh one)",
                       address, r.node.signed_at, timestamp));
  }
  log::info("orchestrator: node {} registered from {}{}", address, ip,
            invite.empty() ? "" : " with invite " + invite);
  reply_json(res, {{"address", address}, {"ip", ip}});
}

std::string Server::Impl::path_address(const httplib::Request& req, const std::string& where) {
  const std::string address = req.matches[1].str();
  if (!rollout::is_node_address(address)) {
    refuse(400, "malformed_request",
           fmt::format("'{}' is not a node address: 64 lowercase hex digits (an Ed25519 public "
                       "key) ({})",
                       address.substr(0, 200), where));
  }
  return address;
}

void Server::Impl::deposit_stake(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /nodes/<address>/stake";
  const std::string address = path_address(req, where);
  const int64_t amount = integer_field(parse_body(req, where), "amount", 1, INT32_MAX, where);
  const int64_t stake = state.deposit_stake(address, amount);
  log::info("orchestrator: node {} staked {} work units (now {})", address, amount, stake);
  reply_json(res, {{"node", address}, {"stake", stake}});
}

void Server::Impl::approve(const httplib::Request& req, httplib::Response& res) {
  const std::string address = path_address(req, "POST /nodes/<address>/approve");
  if (state.approve(address)) log::info("orchestrator: node {} approved", address);
  reply_json(res, {{"node", address}, {"approved", true}});
}

void Server::Impl::node_logs(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "GET /nodes/<address>/logs";
  const std::string address = path_address(req, where);
  int64_t lines = 100;
  if (req.has_param("lines")) {
    const auto n = parse_index(req.get_param_value("lines"));
    if (!n || *n < 1 || *n > kMaxLogLines)
      refuse(400, "malformed_request",
             fmt::format("lines must be 1 to {} ({})", kMaxLogLines, where));
    lines = *n;
  }
  const std::string endpoint = state.node_endpoint(address);
  if (endpoint.empty()) {
    refuse(404, "no_endpoint",
           fmt::format("node {} never joined through an invite: no agent endpoint is known ({})",
                       address, where));
  }
  const std::string target = fmt::format("/logs?lines={}", lines);
  // The node cannot flood the orchestrator, hold this server thread by trickling its answer, nor
  // (its name resolving elsewhere since its invite) aim the request at a service behind it.
  const EndpointRequest ask{
      .endpoint = endpoint,
      .method = "GET",
      .target = target,
      .headers = sign_request(state.ledger().keeper(), address, "GET", target, sha256_hex(""),
                              static_cast<int64_t>(unix_seconds())),
      .max_body_bytes = kMaxLogBytes};
  EndpointAnswer answer =
      std::move(send_to_endpoints({ask}, kLogsDeadlineS, opt.sweep.reach).front());
  if (!answer.ok()) {
    refuse(502, "node_unreachable",
           fmt::format("node {} at {} did not give its logs: {} ({})", address, endpoint,
                       answer.error.empty() ? fmt::format("HTTP {}", answer.status) : answer.error,
                       where));
  }
  res.set_content(std::move(answer.body), "text/plain");
}

std::string Server::Impl::dead_message(const Node& n) const {
  const double now = unix_seconds();
  if (n.heartbeat_at <= 0) {
    return fmt::format(
        "node {} is not registered: its newest registration is {:.0f} s old, it is Stale "
        "(orchestrator.registration_ttl_s = {}; a worker or validator without a node agent "
        "registers again every {:.0f} s); register again with POST /nodes",
        n.address, now - n.last_seen, opt.pool.registration_ttl_s, kRegisterAgainS);
  }
  return fmt::format(
      "node {} is not registered: no heartbeat for {:.0f} s, it is Dead (more than {} missed "
      "at orchestrator.heartbeat_s = {}); register again with POST /nodes",
      n.address, now - n.heartbeat_at, opt.pool.dead_after, opt.pool.heartbeat_s);
}

void Server::Impl::heartbeat(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /heartbeat";
  const Json body = parse_body(req, where);
  const std::string address = address_field(body, "node_address", where);
  require_signed_by(req, address, sha256_hex(req.body), where);
  if (body.contains("state") && string_field(body, "state", where).size() > 64) {
    refuse(400, "malformed_request", fmt::format("field 'state' is over 64 bytes ({})", where));
  }
  switch (state.heartbeat(address, unix_seconds())) {
    case State::Beat::kRecorded:
      break;
    case State::Beat::kNotRegistered:
      refuse(403, "not_registered",
             fmt::format("node {} is not registered: register with POST /nodes first", address));
    case State::Beat::kEvicted:
      refuse(403, "evicted", eviction_message(*state.node(address)));
    case State::Beat::kDead:
      refuse(403, "not_registered", dead_message(*state.node(address)));
  }
  if (body.contains("state")) {  // registered nodes only: the map is bounded by the registry
    std::lock_guard lock(reports_mu);
    agent_states[address] = body.at("state").get<std::string>();
  }
  const std::optional<Task> task = state.task_for(address, unix_seconds());
  reply_json(res, {{"state", "healthy"},
                   {"interval_s", opt.pool.heartbeat_s},
                   {"task", task ? task_json(*task) : Json()}});
}

void Server::Impl::list_nodes(const httplib::Request& req, httplib::Response& res) {
  Json nodes = Json::array();
  for (const Node& n : state.nodes()) nodes.push_back(node_json(n, opt.pool));
  // Nodes found in discovery and sent an invite they have not used yet.
  reply_json(res, {{"nodes", nodes}, {"invited", state.invited(unix_seconds())}});
}

void Server::Impl::evict(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /nodes/<address>/evict";
  const std::string address = path_address(req, where);
  std::string reason;
  if (!req.body.empty()) {
    const Json body = parse_body(req, where);
    if (body.contains("reason")) reason = string_field(body, "reason", where);
  }
  if (reason.size() > kMaxReasonBytes) {
    refuse(400, "malformed_request",
           fmt::format("field 'reason' is longer than {} bytes ({})", kMaxReasonBytes, where));
  }
  if (reason.empty()) reason = "no reason given";
  Eviction e;
  {
    std::lock_guard lock(decide_mu);  // no upload of the node is accepted after this answer
    e = state.evict(address, reason, unix_seconds());
    drop_files(e.rejected);
  }
  log_eviction(e);
  reply_json(res, node_json(e.node, opt.pool));
}

void Server::Impl::log_eviction(const Eviction& e) {
  log::warn("orchestrator: node {} ({}) evicted: {}", e.node.address,
            e.node.ip.empty() ? "no IP" : e.node.ip, e.node.evicted_reason);
  for (const SubmissionKey& key : e.rejected) {
    log::warn("orchestrator: rejected {} while it was being validated: {}", describe(key),
              eviction_message(e.node));
  }
}

void Server::Impl::drop_files(const std::vector<SubmissionKey>& keys) {
  for (const SubmissionKey& key : keys) {
    try {
      validating.remove(key.step, file_name(key));
    } catch (const Error& e) {
      log::error("orchestrator: {}", e.what());
    }
  }
}

void Server::Impl::allowlist(const httplib::Request& req, httplib::Response& res) {
  const Allowlist a = state.allowlist(unix_seconds());
  reply_json(res, {{"revision", a.revision}, {"ips", a.ips}});
}

}  // namespace trellis::orchestrator
