// HfConfig: the architecture of a model as read from (and written to) a Hugging Face config.json.
//
// Supports model_type llama, qwen2 and qwen3. Every field the transformer depends on is read
// explicitly; a missing or mistyped field, an unknown model_type or an unsupported feature
// (a rope_scaling other than linear, llama3 or yarn; sliding windows) is an Error naming the field
// and file, never a silent default.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "model/rope_scaling.h"

namespace trellis::model {

enum class Arch { Llama, Qwen2, Qwen3 };

const char* arch_name(Arch arch);  // "llama" | "qwen2" | "qwen3" (the HF model_type)
Arch parse_arch(const std::string& name, const std::string& where);

// Upper bounds on a config.json's dimensions. A config comes with a model from anywhere, and every
// dimension sizes an allocation (weights, RoPE tables, KV caches) before any weight is read; the
// bounds are far above every public model (Llama-3.1-405B: hidden 16,384, 126 layers, 128 heads,
// intermediate 53,248; vocabularies up to 262,144; contexts up to Llama 4 Scout's 10,485,760) and
// keep num_parameters() and every product of two dimensions well inside int64.
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 17;        // 131,072
inline constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;  // 1,048,576
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxHeads = 1024;
inline constexpr int64_t kMaxHeadDim = 1024;
inline constexpr int64_t kMaxConfigVocabSize = int64_t{1}
                                               << 21;       // as the tokenizer's kMaxVocabSize
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;  // 16,777,216
// The RoPE tables hold a cosine and a sine for each pair of dimensions of every position a run
// reaches (they grow with it): at most max_position_embeddings x head_dim floats, 8 GiB (Llama 4
// Scout's whole context: 5.4 GB).
inline constexpr int64_t kMaxRopeTableEntries = int64_t{1} << 31;

// One weight of a model: its Hugging Face name and shape.
struct WeightShape {
  std::string name;
  std::vector<int64_t> shape;
};

struct HfConfig {
  Arch arch = Arch::Qwen2;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // "rope_scaling", or Transformers v5's "rope_parameters"
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projection bias (always true for qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k (qwen3)
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::string torch_dtype = "bfloat16";
  // quantization_config {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}:
  // some weights are stored as E4M3 codes with 128x128 block scales (DeepSeek-V3's format,
  // model/checkpoint.h). Any other quantization_config is refused.
  bool fp8_blocks = false;

  static HfConfig from_json(const Json& j, const std::string& where);
  static HfConfig load(const std::filesystem::path& model_dir);  // DIR/config.json
  Json to_json() const;
  void save(const std::filesystem::path& model_dir) const;

  // Throws if the shapes are inconsistent (e.g. heads not dividing, kv heads not dividing heads)
  // or a dimension is outside (0, its kMax... bound].
  void validate(const std::string& where) const;
  // Every weight of a model of this config, in the order the Transformer holds them: the
  // embedding, each layer's, the final norm, and the LM head unless it is tied to the embedding.
  std::vector<WeightShape> weight_shapes() const;
  // Number of parameters, counting a tied embedding once.
  int64_t num_parameters() const;
  // Weights that take part in matmuls per token (projections, MLP, LM head): 2 FLOPs each per
  // token forward, and each read once per decode step.
  int64_t num_matmul_parameters() const;
};

}  // namespace trellis::model
