#include "orchestrator/admission.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace trellis::orchestrator {
namespace {

// Below this the estimate says "almost no group has signal"; asking for 20x the shortfall is as
// far as it is worth trusting (a file's size caps it anyway).
constexpr double kMinSignalRatio = 0.05;

}  // namespace

double expected_signal(const StepTally& tally, int64_t group_size, double signal_ratio) {
  return static_cast<double>(tally.accepted_signal + tally.validating_signal) +
         static_cast<double>(tally.open_groups * group_size) * signal_ratio;
}

Admission admit(const AdmissionRules& rules, const AdmissionSnapshot& snapshot,
                const WorkRequest& request) {
  Admission out;
  const auto wait = [&](std::string reason) {
    out.wait_reason = std::move(reason);
    return out;
  };
  if (snapshot.counter >= rules.steps) return wait("every step has its samples: the run is done");
  if (request.held_version < 0)
    return wait("hold a policy version first (fetch one through the relays)");
  const int64_t lowest_version = snapshot.counter - rules.async_level;
  if (request.held_version < lowest_version) {
    return wait(fmt::format(
        "policy version {} is too old: step {} (the step counter) takes versions from {} (step - "
        "rl.async_level); fetch a newer one",
        request.held_version, snapshot.counter, lowest_version));
  }
  const int64_t G = rules.group_size;
  const double ratio = std::max(kMinSignalRatio, snapshot.signal_ratio);
  const int64_t by_version = std::min(snapshot.policy_version, request.held_version);
  const int64_t last = std::min(rules.steps - 1, by_version + rules.async_level);
  for (int64_t s = snapshot.counter; s <= last; ++s) {
    const auto it = snapshot.steps.find(s);
    const StepTally tally = it == snapshot.steps.end() ? StepTally{} : it->second;
    // A group brings G signal samples or none: a step whose open work is expected to come within
    // half a group of its need is covered, and work is sized to the nearest whole number of
    // groups. Rounding up instead would hand out a second group for most last shares, and drop it
    // when the first one fills the step; a share that falls short is handed out again once the
    // open work has arrived.
    const double group_signal = static_cast<double>(G) * ratio;
    const double short_by =
        static_cast<double>(rules.batch_size) - expected_signal(tally, G, ratio);
    if (short_by <= 0 || (tally.open_groups > 0 && short_by <= group_signal / 2)) continue;
    // The backlog bound: samples waiting for a verdict plus those being generated.
    const int64_t in_flight = snapshot.validating_samples + snapshot.open_groups * G;
    const int64_t room_groups = (rules.max_backlog_samples - in_flight) / G;
    if (room_groups < 1) {
      out.backlog_full = snapshot.validating_samples >= rules.batch_size;
      return wait(fmt::format(
          "the validation backlog is full: {} samples wait for a verdict and {} are being "
          "generated (at most {}: orchestrator.max_backlog_steps x rl.batch_size)",
          snapshot.validating_samples, snapshot.open_groups * G, rules.max_backlog_samples));
    }
    const int64_t needed = std::llround(short_by / group_signal);
    out.step = s;
    out.groups = std::max<int64_t>(1, std::min({needed, request.max_groups, room_groups}));
    return out;
  }
  const std::string covered = fmt::format(
      "steps up to {} have their samples (accepted, validating or being generated)", last);
  if (last == rules.steps - 1) return wait(covered);
  if (request.held_version < snapshot.policy_version) {
    return wait(fmt::format("{}; step {} needs policy version {} (published: fetch it)", covered,
                            last + 1, last + 1 - rules.async_level));
  }
  return wait(fmt::format("{}; step {} opens when the trainer publishes policy version {}", covered,
                          last + 1, last + 1 - rules.async_level));
}

}  // namespace trellis::orchestrator
