// RopeScaling: how a checkpoint stretches its rotary position frequencies for long contexts, as
// read from config.json's "rope_scaling" (or Transformers v5's "rope_parameters").
//
// Supported are the three schemes released checkpoints use, with Hugging Face's field names and
// defaults: "linear" (every frequency / factor), "llama3" (Llama 3.1+: low frequencies / factor,
// high ones kept, a smooth ramp between) and "yarn" (Qwen2.5/Qwen3 long context, DeepSeek-V3,
// gpt-oss: a ramp over dimensions plus an attention factor on cos/sin). "default" is plain RoPE.
// Anything else ("dynamic", "longrope", an unknown key) is an Error naming the field: a silently
// ignored scaling would give a model wrong positions without any visible failure.
//
// model/rope.h turns this into frequencies; this part stays torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/json.h"

namespace trellis::model {

enum class RopeType { Default, Linear, Llama3, Yarn };

const char* rope_type_name(RopeType type);  // "default" | "linear" | "llama3" | "yarn"

struct RopeScaling {
  RopeType type = RopeType::Default;
  double factor = 1.0;  // linear, llama3, yarn: how many times the context is stretched
  // llama3 (required), yarn (optional, else max_position_embeddings): the pretraining context.
  std::optional<int64_t> original_max_position_embeddings;
  double low_freq_factor = 0, high_freq_factor = 0;  // llama3 (required)
  // yarn, all optional: the cos/sin multiplier (else from mscale, mscale_all_dim and factor), the
  // ramp's rotation bounds (32 and 1) and whether its ends round to whole dimensions (true).
  std::optional<double> attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim;
  std::optional<bool> truncate;

  bool operator==(const RopeScaling&) const = default;

  // From a "rope_scaling" / "rope_parameters" object (null = plain RoPE). Errors name `where`.
  static RopeScaling from_json(const Json& j, const std::string& where);
  // The object from_json reads back (null for plain RoPE), in Hugging Face's spelling.
  Json to_json() const;
  // One line for `trellis model info`: "yarn, factor 4, original context 32768".
  std::string describe() const;
};

}  // namespace trellis::model
