// Who may join the pool and what a rejected submission costs (specs/protocol.md §5). A key is
// free, so a node evicted under one key could return under another: joining costs something the
// pool owner controls. Under "stake" a node needs `stake` work units escrowed on the ledger (the
// owner deposits them: `trellis orchestrator stake`); under "approval" the owner approves each
// address (`trellis orchestrator approve`); "open" admits any key (one machine, a trusted swarm).
// A rejected submission slashes the node's stake by `slash` (0: all of it). However a node joins,
// one IP holds at most `max_nodes_per_ip` live nodes: a key is free, an address is not. The policy
// is the ledger's pool entry.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/json.h"

namespace trellis::orchestrator {

struct PoolPolicy {
  std::string join = "open";  // open | stake | approval
  int64_t stake = 0;          // work units a node must hold staked to join under "stake"
  int64_t slash = 0;          // taken from a node's stake per rejected submission; 0 = all
  bool validation = true;     // files wait for a validator's verdict
  bool evict_on_reject = true;
  // Live nodes (registered, not evicted, dead or stale) one IP may hold, an IPv6 address counted by
  // its /64 (what one subscriber gets); 0 = no limit.
  int64_t max_nodes_per_ip = 32;
  // Liveness: a node that sends heartbeats is Unhealthy once it missed `unhealthy_after` of them
  // and Dead (off the allowlist, refused until it registers again) after `dead_after`.
  double heartbeat_s = 5;
  int64_t unhealthy_after = 3, dead_after = 6;
  // A node that never sent a heartbeat (a worker or validator started without an agent, which
  // registers again every kRegisterAgainS) is Stale once its newest registration is this old:
  // off the allowlist, not counted on its IP, refused until it registers again.
  double registration_ttl_s = 600;

  Json to_json() const;
};

// How often a node without an agent registers again (its liveness: PoolPolicy::registration_ttl_s).
inline constexpr double kRegisterAgainS = 60;

// [orchestrator] join, stake, slash, validation, evict_on_reject, max_nodes_per_ip, heartbeat_s,
// unhealthy_after, dead_after and registration_ttl_s; Error naming the key for an unknown join
// rule, a negative amount, "stake" with a stake of 0, dead_after not above unhealthy_after, or a
// registration_ttl_s that is not well above kRegisterAgainS.
PoolPolicy pool_policy(const Config& config);

}  // namespace trellis::orchestrator
