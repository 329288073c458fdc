// Simple generation: one prompt, one completion, with a KV cache and seeded sampling. The rollout
// engine (continuous batching, verifiable sampling) is its own module; this serves `trellis
// generate` for a quick look at a model and the model-level tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace trellis::model {

struct GenerateOptions {
  int64_t max_tokens = 64;
  double temperature = 1.0;  // 0 = greedy
  uint64_t seed = 0;
  // Sample only ids below this (0 = the whole vocab). Checkpoints pad their embedding past the
  // tokenizer's last token; those rows are untrained and name no token.
  int64_t vocab_limit = 0;
};

struct Generation {
  std::vector<int32_t> tokens;
  std::string finish_reason;  // "stop" (a stop id) or "length"
};

// Calls on_token (if set) for each new token as it is produced.
Generation generate(Transformer& model, const std::vector<int32_t>& prompt,
                    const std::vector<int64_t>& stop_ids, const GenerateOptions& options,
                    const std::function<void(int32_t)>& on_token = {});

}  // namespace trellis::model
