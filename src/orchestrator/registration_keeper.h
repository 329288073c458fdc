// RegistrationKeeper: keeps a node that runs without a node agent (`trellis infer`, `trellis
// validate`) registered with its orchestrator. Such a node is live, and on the relays' allowlist,
// while its newest registration is younger than orchestrator.registration_ttl_s (600 s by
// default). The keeper registers at once and then every kRegisterAgainS from a thread of its own,
// so that the node stays live through work longer than that: a checkpoint downloaded over a slow
// link, a long judgement. (Registering between passes of that work let the registration lapse
// mid-download, and the relays then refused the rest of it.)
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "common/identity.h"
#include "orchestrator/pool_policy.h"

namespace trellis::orchestrator {

class RegistrationKeeper {
 public:
  // Registers `identity` with the orchestrator at `orchestrator_url` (as Client: `token` is the
  // role's bearer token, if any) every `interval_s` until `stop` is set or the keeper is
  // destroyed; a failed registration is logged (at most every 10 s) and tried again a second
  // later.
  RegistrationKeeper(std::string orchestrator_url, std::string token, const Identity& identity,
                     const std::atomic<bool>& stop, double interval_s = kRegisterAgainS);
  ~RegistrationKeeper();
  RegistrationKeeper(const RegistrationKeeper&) = delete;
  RegistrationKeeper& operator=(const RegistrationKeeper&) = delete;

  // Whether a registration has succeeded yet: relays refuse a node before its first.
  bool registered() const { return registered_; }

 private:
  void loop();

  const std::string url_, token_;
  const Identity& identity_;
  const std::atomic<bool>& stop_;
  const double interval_s_;
  std::atomic<bool> registered_{false}, stopping_{false};
  std::thread thread_;
};

}  // namespace trellis::orchestrator
