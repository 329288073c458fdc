#include "orchestrator/registration_keeper.h"

#include <algorithm>
#include <chrono>

#include "common/clock.h"
#include "common/exception_message.h"
#include "common/logging.h"
#include "orchestrator/client.h"

namespace trellis::orchestrator {

RegistrationKeeper::RegistrationKeeper(std::string orchestrator_url, std::string token,
                                       const Identity& identity, const std::atomic<bool>& stop,
                                       double interval_s)
    : url_(std::move(orchestrator_url)),
      token_(std::move(token)),
      identity_(identity),
      stop_(stop),
      interval_s_(interval_s),
      thread_([this] { loop(); }) {}

RegistrationKeeper::~RegistrationKeeper() {
  stopping_ = true;
  thread_.join();
}

void RegistrationKeeper::loop() {
  double last_warning = -1e9;
  while (!stop_ && !stopping_) {
    double wait_s = interval_s_;
    try {
      Client(url_, token_).register_node(identity_);
      registered_ = true;
    } catch (const std::exception& e) {
      wait_s = std::min(1.0, interval_s_);
      if (monotonic_seconds() - last_warning > 10) {
        log::warn("registration with {}: {}", url_, message_of(e));
        last_warning = monotonic_seconds();
      }
    }
    const double until = monotonic_seconds() + wait_s;
    while (monotonic_seconds() < until && !stop_ && !stopping_)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace trellis::orchestrator
