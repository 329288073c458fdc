#include "orchestrator/invite_sweep.h"

#include <chrono>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/exception_message.h"
#include "common/logging.h"
#include "orchestrator/endpoint_request.h"
#include "orchestrator/invite.h"

namespace trellis::orchestrator {
namespace {

// Invites sent per sweep, at most: nodes that did not get one this time are found again by the
// next sweep.
constexpr int64_t kMaxInvitesPerSweep = 64;

}  // namespace

SweepOptions SweepOptions::from_config(const Config& config) {
  SweepOptions o;
  o.discovery_url = config.get<std::string>("orchestrator.discovery_url");
  o.interval_s = config.get_at_least<double>("orchestrator.invite_sweep_s", 0.05);
  o.invite_ttl_s = config.get_at_least<int64_t>("orchestrator.invite_ttl_s", 1);
  o.reach = config.get<bool>("orchestrator.invite_private_addresses") ? EndpointReach::kAny
                                                                      : EndpointReach::kPublic;
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
        log::warn("orchestrator: invite sweep: {}", message_of(e));
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
  state_.forget_expired_invites(unix_seconds());
  std::vector<std::string> nodes;  // of each post
  std::vector<EndpointRequest> posts;
  for (const discovery::DiscoveredNode& d : discovery_.nodes(keeper)) {
    const auto& m = d.metadata;
    const double now = unix_seconds();
    if (std::ssize(posts) == kMaxInvitesPerSweep) break;  // the rest next time
    if (!state_.wants_invite(m.address, now)) continue;
    if (!discovery::unmet(m.hardware, opt_.requirements).empty()) continue;
    const Invite invite =
        make_invite(keeper, state_.run_id(), opt_.domain, m.address, orchestrator_url,
                    static_cast<int64_t>(now), opt_.invite_ttl_s);
    // Recorded first: the node may register before its answer reaches us.
    state_.record_invite(m.address, invite.nonce, static_cast<double>(invite.expires), now,
                         m.endpoint);
    state_.record_node_metadata(m.address, discovery::to_json(m).dump(), now);  // the dashboard's
    // Nothing of the answer is read but its status.
    posts.push_back({.endpoint = m.endpoint,
                     .method = "POST",
                     .target = "/invite",
                     .headers = {{"Content-Type", "application/json"}},
                     .body = to_json(invite).dump(),
                     .max_body_bytes = 0});
    nodes.push_back(m.address);
  }
  if (posts.empty()) return 0;
  const std::vector<EndpointAnswer> answers =
      send_to_endpoints(posts, opt_.request_timeout_s, opt_.reach);
  int64_t accepted = 0;
  for (size_t i = 0; i < answers.size(); ++i) {
    if (answers[i].ok()) {
      ++accepted;
      log::info("orchestrator: invited node {} at {}", nodes[i], posts[i].endpoint);
    } else if (!answers[i].refused_address.empty() && unix_seconds() - private_warned_at_ > 60) {
      // A warning once a minute at most (strangers may publish any number of such endpoints):
      // on a private network, it is how the operator learns the setting they need.
      log::warn("orchestrator: node {} at {} was not invited: {}", nodes[i], posts[i].endpoint,
                answers[i].error);
      private_warned_at_ = unix_seconds();
    } else {
      log::debug(
          "orchestrator: node {} at {} did not take its invite ({})", nodes[i], posts[i].endpoint,
          answers[i].status ? fmt::format("status {}", answers[i].status) : answers[i].error);
    }
  }
  return accepted;
}

}  // namespace trellis::orchestrator
