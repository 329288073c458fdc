// rl.precision: which forwards run the decoder's linear layers in block-scaled FP8 (Jet-RL,
// specs/rl.md §7, model/fp8/).
//   "bf16"         everything in the compute dtype (bf16, or fp32 where the CPU lacks bf16)
//   "fp8-rollout"  the engine in FP8, the trainer in the compute dtype: two different forward
//                  graphs, the common recipe Jet-RL shows to be off-policy
//   "fp8"          unified: the trainer's forward is the engine's FP8 graph, and its backward
//                  runs FP8 DGrad and WGrad
// (specs/rl.md calls the unified mode "fp8-unified"; the issue and the config say "fp8".)
#pragma once

#include <string>

#include "common/config.h"

namespace trellis::rl {

struct Precision {
  bool rollout_fp8 = false;  // the engine's forwards
  bool train_fp8 = false;    // the trainer's forwards and backward

  // Error naming rl.precision unless it is one of the three modes.
  static Precision from_config(const Config& config);
  std::string name() const;
};

}  // namespace trellis::rl
