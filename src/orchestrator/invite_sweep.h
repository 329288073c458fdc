// The orchestrator's invite sweep (specs/protocol.md §4): every few seconds it lists the live
// nodes of a `trellis discovery` service (signed by its key, which the service must list among its
// readers), and sends a signed invite (invite.h) to each node that meets the pool's requirements,
// is not a live member, was never evicted and holds no invite still valid. The node's agent
// checks the invite and registers with its nonce; the registration records the invite on the
// ledger. A node that died (no heartbeats) returns the same way: it is invited again.
//
// The endpoint is a stranger's URL: the orchestrator sends it one small POST per invite lifetime,
// all of a sweep's invites at once, each within request_timeout_s for the whole exchange, and reads
// nothing of an answer but its status (endpoint_request.h). Unless
// orchestrator.invite_private_addresses is set, it posts only to addresses the public internet
// reaches: a stranger's URL cannot aim it at the loopback, private or link-local services of the
// orchestrator's own network.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "common/config.h"
#include "discovery/client.h"
#include "discovery/requirements.h"
#include "orchestrator/endpoint_request.h"
#include "orchestrator/state.h"

namespace trellis::orchestrator {

struct SweepOptions {
  std::string discovery_url;  // "" = no sweep
  double interval_s = 5;
  int64_t invite_ttl_s = 60;
  std::string domain;  // what the pool trains (env.name unless set)
  discovery::Requirements requirements;
  double request_timeout_s = 2;  // per invite (the whole exchange), and per read from discovery
  // Where invites, and the operator's fetches of a node's logs, may connect: kAny for a pool on a
  // private network (trellis run's included).
  EndpointReach reach = EndpointReach::kPublic;

  // [orchestrator] discovery_url, invite_sweep_s, invite_ttl_s, invite_private_addresses, domain
  // and requirements.
  static SweepOptions from_config(const Config& config);
};

class InviteSweep {
 public:
  InviteSweep(SweepOptions options, State& state);
  ~InviteSweep();  // stop()

  // Sweeps every interval_s on a thread of its own, inviting nodes to register at
  // `orchestrator_url`. Nothing when options.discovery_url is "".
  void start(const std::string& orchestrator_url);
  void stop();
  // One sweep now; returns how many invites the nodes accepted. Error when discovery cannot be
  // read (unreachable, or this orchestrator is not among its readers).
  int64_t sweep_once(const std::string& orchestrator_url);

 private:
  void loop(std::string orchestrator_url);

  SweepOptions opt_;
  State& state_;
  discovery::Client discovery_;  // learns the service's id (what reads are signed for) once
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  // When an invite refused for its address was last logged as a warning (sweeps only).
  double private_warned_at_ = -1e9;
  std::thread thread_;
};

}  // namespace trellis::orchestrator
