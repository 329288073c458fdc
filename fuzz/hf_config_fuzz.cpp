// libFuzzer target for a checkpoint's config.json, which comes with a model from anywhere. The
// first byte picks the input's form:
//   - 'd': the rest is dimensions, 8 bytes each (hidden_size, intermediate_size, num_hidden_layers,
//     num_attention_heads, num_key_value_heads, head_dim, vocab_size, max_position_embeddings,
//     then a yarn rope_scaling's original_max_position_embeddings), written into a small qwen3
//     config: any int64 at all, which JSON text rarely reaches by mutation;
//   - anything else: the whole input is config.json's text.
// Then parse_json and HfConfig::from_json (the architecture, rope_scaling or Transformers v5's
// rope_parameters, quantization_config). Anything but a trellis::Error is a bug (UBSan reports an
// overflowing product of dimensions as one). A config that is accepted must also hold what the
// loader relies on before it allocates anything:
//   - every dimension is inside its kMax... bound, and the RoPE tables inside theirs;
//   - weight_shapes() lists each weight once, and their elements add up to num_parameters();
//   - to_json() reads back to the same config (what a saved checkpoint writes).
// scripts/fuzz.sh builds and runs it; fuzz/corpus/hf_config/ holds the seeds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/json.h"
#include "model/hf_config.h"

namespace {

using trellis::model::HfConfig;

bool within(int64_t v, int64_t max) { return v > 0 && v <= max; }

void check_accepted(const HfConfig& c) {
  using namespace trellis::model;
  if (!within(c.hidden_size, kMaxHiddenSize) ||
      !within(c.intermediate_size, kMaxIntermediateSize) ||
      !within(c.num_hidden_layers, kMaxLayers) || !within(c.num_attention_heads, kMaxHeads) ||
      !within(c.num_key_value_heads, kMaxHeads) || !within(c.head_dim, kMaxHeadDim) ||
      !within(c.vocab_size, kMaxConfigVocabSize) ||
      !within(c.max_position_embeddings, kMaxPositions) ||
      c.max_position_embeddings * c.head_dim > kMaxRopeTableEntries ||
      c.num_attention_heads % c.num_key_value_heads != 0 || c.head_dim % 2 != 0) {
    __builtin_trap();
  }
  // The weights, counted one by one (a large but legal config has tens of thousands; the fuzzer
  // keeps to the small ones, which is where the shapes' rules differ).
  if (c.num_hidden_layers <= 64) {
    int64_t total = 0;
    std::set<std::string> names;
    for (const WeightShape& w : c.weight_shapes()) {
      int64_t n = 1;
      for (int64_t dim : w.shape) {
        if (dim <= 0) __builtin_trap();
        n *= dim;
      }
      total += n;
      if (!names.insert(w.name).second) __builtin_trap();
    }
    if (total != c.num_parameters()) __builtin_trap();
  }
  (void)c.num_matmul_parameters();
  (void)c.rope_scaling.describe();
  // A saved config reads back as itself (an Error here escapes and is reported as a crash).
  const trellis::Json saved = c.to_json();
  const HfConfig again =
      HfConfig::from_json(trellis::parse_json(saved.dump(), "saved config"), "saved config");
  if (again.to_json() != saved) __builtin_trap();
}

// A small qwen3 config.json with the dimensions the input's 8-byte words give.
trellis::Json config_of_dimensions(const uint8_t* data, size_t size) {
  trellis::Json j = {
      {"model_type", "qwen3"},  {"hidden_size", 256},       {"intermediate_size", 512},
      {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
      {"head_dim", 64},         {"vocab_size", 320},        {"max_position_embeddings", 2048},
      {"rms_norm_eps", 1e-6}};
  static const char* kFields[] = {
      "hidden_size",         "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim",          "vocab_size",        "max_position_embeddings"};
  size_t field = 0;
  for (; field < 9 && (field + 1) * 8 <= size; ++field) {
    int64_t v;
    std::memcpy(&v, data + field * 8, 8);
    if (field < 8) {
      j[kFields[field]] = v;
    } else {
      j["rope_scaling"] = {
          {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", v}};
    }
  }
  return j;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  HfConfig config;
  try {
    if (data[0] == 'd') {
      config = HfConfig::from_json(config_of_dimensions(data + 1, size - 1), "dimensions");
    } else {
      const std::string_view text(reinterpret_cast<const char*>(data), size);
      config = HfConfig::from_json(trellis::parse_json(text, "config.json"), "config.json");
    }
  } catch (const trellis::Error&) {
    return 0;
  }
  check_accepted(config);
  return 0;
}
