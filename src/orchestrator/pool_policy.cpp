#include "orchestrator/pool_policy.h"

#include "common/error.h"

namespace trellis::orchestrator {

Json PoolPolicy::to_json() const {
  return {{"join", join},
          {"stake", stake},
          {"slash", slash},
          {"validation", validation},
          {"evict_on_reject", evict_on_reject}};
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
  return p;
}

}  // namespace trellis::orchestrator
