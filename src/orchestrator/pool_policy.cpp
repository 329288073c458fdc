#include "orchestrator/pool_policy.h"

#include "common/error.h"

namespace trellis::orchestrator {

Json PoolPolicy::to_json() const {
  return {{"join", join},
          {"stake", stake},
          {"slash", slash},
          {"validation", validation},
          {"evict_on_reject", evict_on_reject},
          {"max_nodes_per_ip", max_nodes_per_ip},
          {"heartbeat_s", heartbeat_s},
          {"unhealthy_after", unhealthy_after},
          {"dead_after", dead_after},
          {"registration_ttl_s", registration_ttl_s}};
}

PoolPolicy pool_policy(const Config& config) {
  PoolPolicy p;
  p.join = config.get<std::string>("orchestrator.join");
  if (p.join != "open" && p.join != "stake" && p.join != "approval") {
    fail("orchestrator.join", "'{}' is not a join rule: open, stake or approval",
         p.join.substr(0, 100));
  }
  p.stake = config.get_at_least<int64_t>("orchestrator.stake", 0);
  p.slash = config.get_at_least<int64_t>("orchestrator.slash", 0);
  if (p.join == "stake" && p.stake == 0) {
    fail("orchestrator.stake",
         "is 0 under join = \"stake\": a free stake stops no one (set the "
         "work units a node must escrow)");
  }
  p.validation = config.get<bool>("orchestrator.validation");
  p.evict_on_reject = config.get<bool>("orchestrator.evict_on_reject");
  p.max_nodes_per_ip = config.get_at_least<int64_t>("orchestrator.max_nodes_per_ip", 0);
  p.heartbeat_s = config.get<double>("orchestrator.heartbeat_s");
  if (!(p.heartbeat_s >= 0.05 && p.heartbeat_s <= 3600)) {
    fail("orchestrator.heartbeat_s", "must be in [0.05, 3600] seconds, got {}", p.heartbeat_s);
  }
  p.unhealthy_after = config.get_at_least<int64_t>("orchestrator.unhealthy_after", 1);
  p.dead_after = config.get_at_least<int64_t>("orchestrator.dead_after", 2);
  if (p.dead_after <= p.unhealthy_after) {
    fail("orchestrator.dead_after", "must be above orchestrator.unhealthy_after ({}), got {}",
         p.unhealthy_after, p.dead_after);
  }
  p.registration_ttl_s = config.get<double>("orchestrator.registration_ttl_s");
  if (!(p.registration_ttl_s >= 2 * kRegisterAgainS && p.registration_ttl_s <= 86400)) {
    fail(
        "orchestrator.registration_ttl_s",
        "must be in [{}, 86400] seconds (nodes without an agent register again every {} s), got {}",
        2 * kRegisterAgainS, kRegisterAgainS, p.registration_ttl_s);
  }
  return p;
}

}  // namespace trellis::orchestrator
