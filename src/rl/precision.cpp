#include "rl/precision.h"

#include "common/error.h"

namespace trellis::rl {

Precision Precision::from_config(const Config& config) {
  const auto mode = config.get<std::string>("rl.precision");
  if (mode == "bf16") return {false, false};
  if (mode == "fp8-rollout") return {true, false};
  if (mode == "fp8") return {true, true};
  fail("rl.precision", "'{}' is not a precision mode: bf16, fp8-rollout or fp8", mode);
}

std::string Precision::name() const {
  return train_fp8 ? "fp8" : rollout_fp8 ? "fp8-rollout" : "bf16";
}

}  // namespace trellis::rl
