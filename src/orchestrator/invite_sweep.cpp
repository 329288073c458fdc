#include "orchestrator/invite_sweep.h"

#include <httplib.h>

#include <chrono>

#include "common/clock.h"
#include "common/error.h"
#include "common/http_service.h"
#include "common/logging.h"
#include "orchestrator/invite.h"

namespace trellis::orchestrator {
namespace {

// Invites sent per sweep, at most: each may wait request_timeout_s for a node that does not
// answer, and nodes that did not get one this time are found again by the next sweep.
constexpr int64_t kMaxInvitesPerSweep = 64;

// POSTs `invite` to a node's endpoint: true when it answers 200. The endpoint is whatever a
// stranger published, so nothing of its answer is read but the status line and headers: the
// request stops there, and an endless body costs nothing.
bool post_invite(const std::string& endpoint, const Invite& invite, double timeout_s) {
  httplib::Client c = http_client(endpoint, timeout_s);
  httplib::Request req;
  req.method = "POST";
  req.path = "/invite";
  req.headers.emplace("Content-Type", "application/json");
  req.body = to_json(invite).dump();
  int status = 0;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return false;  // read no body
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  // Error::Canceled once the handler has the status; an answer without a body (204) completes.
  if (c.send(req, res, error)) status = res.status;
  if (status != 200) {
    log::debug("orchestrator: node {} at {} did not take its invite ({})", invite.node, endpoint,
               status ? fmt::format("status {}", status) : httplib::to_string(error));
  }
  return status == 200;
}

}  // namespace

SweepOptions SweepOptions::from_config(const Config& config) {
  SweepOptions o;
  o.discovery_url = config.get<std::string>("orchestrator.discovery_url");
  o.interval_s = config.get_at_least<double>("orchestrator.invite_sweep_s", 0.05);
  o.invite_ttl_s = config.get_at_least<int64_t>("orchestrator.invite_ttl_s", 1);
  o.domain = config.get<std::string>("orchestrator.domain");
  if (o.domain.empty()) o.domain = config.get<std::string>("env.name");
  o.requirements = discovery::requirements(config, "orchestrator.requirements");
  return o;
}

InviteSweep::InviteSweep(SweepOptions options, State& state)
    : opt_(std::move(options)),
      state_(state),
      discovery_(opt_.discovery_url, opt_.request_timeout_s) {}

InviteSweep::~InviteSweep() { stop(); }

void InviteSweep::start(const std::string& orchestrator_url) {
  if (opt_.discovery_url.empty() || thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this, orchestrator_url] { loop(orchestrator_url); });
}

void InviteSweep::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void InviteSweep::loop(std::string orchestrator_url) {
  double last_warning = -1e9;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    try {
      sweep_once(orchestrator_url);
    } catch (const std::exception& e) {
      if (unix_seconds() - last_warning > 60) {  // an outage is logged, not a line per sweep
        log::warn("orchestrator: invite sweep: {}", e.what());
        last_warning = unix_seconds();
      }
    }
    lock.lock();
    wake_.wait_for(lock, std::chrono::duration<double>(opt_.interval_s),
                   [this] { return stopping_; });
  }
}

int64_t InviteSweep::sweep_once(const std::string& orchestrator_url) {
  const Identity& keeper = state_.ledger().keeper();
  int64_t accepted = 0, sent = 0;
  state_.forget_expired_invites(unix_seconds());
  for (const discovery::DiscoveredNode& d : discovery_.nodes(keeper)) {
    const auto& m = d.metadata;
    const double now = unix_seconds();
    if (sent == kMaxInvitesPerSweep) break;  // the rest next time: a sweep stays short
    if (!state_.wants_invite(m.address, now)) continue;
    if (!discovery::unmet(m.hardware, opt_.requirements).empty()) continue;
    ++sent;
    const Invite invite =
        make_invite(keeper, state_.run_id(), opt_.domain, m.address, orchestrator_url,
                    static_cast<int64_t>(now), opt_.invite_ttl_s);
    // Recorded first: the node may register before its answer reaches us.
    state_.record_invite(m.address, invite.nonce, static_cast<double>(invite.expires), now,
                         m.endpoint);
    state_.record_node_metadata(m.address, discovery::to_json(m).dump(), now);  // the dashboard's
    if (post_invite(m.endpoint, invite, opt_.request_timeout_s)) {
      ++accepted;
      log::info("orchestrator: invited node {} at {}", m.address, m.endpoint);
    }
  }
  return accepted;
}

}  // namespace trellis::orchestrator
