#include "model/hf_config.h"

#include <cmath>

#include "common/files.h"

namespace trellis::model {

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::Llama:
      return "llama";
    case Arch::Qwen2:
      return "qwen2";
    case Arch::Qwen3:
      return "qwen3";
  }
  return "?";
}

Arch parse_arch(const std::string& name, const std::string& where) {
  if (name == "llama") return Arch::Llama;
  if (name == "qwen2") return Arch::Qwen2;
  if (name == "qwen3") return Arch::Qwen3;
  fail(where, "unsupported model_type '{}' (supported: llama, qwen2, qwen3)", name);
}

namespace {

std::vector<int64_t> read_eos(const Json& j, const std::string& where) {
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return {};
  const Json& v = j["eos_token_id"];
  if (v.is_number_integer()) return {v.get<int64_t>()};
  if (v.is_array()) {
    std::vector<int64_t> out;
    for (const auto& e : v) {
      if (!e.is_number_integer()) fail(where, "field 'eos_token_id' must hold integers");
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  fail(where, "field 'eos_token_id' must be an integer or a list of integers");
}

// Transformers v5 writes {"rope_parameters": {"rope_type", "rope_theta", ...}}; earlier versions
// a top-level rope_theta and {"rope_scaling": {"type" or "rope_type", ...}}.
void read_rope(const Json& j, const std::string& where, HfConfig& c) {
  if (j.contains("partial_rotary_factor") &&
      json_required<double>(j, "partial_rotary_factor", where) != 1.0) {
    fail(where, "field 'partial_rotary_factor' other than 1 is not supported");
  }
  const bool v5 = j.contains("rope_parameters") && !j["rope_parameters"].is_null();
  Json scaling = v5 ? j["rope_parameters"] : j.value("rope_scaling", Json());
  const std::string scaling_where = where + (v5 ? ": rope_parameters" : ": rope_scaling");
  if (v5 && scaling.is_object() && scaling.contains("rope_theta")) {
    c.rope_theta = json_required<double>(scaling, "rope_theta", scaling_where);
    scaling.erase("rope_theta");
  }
  c.rope_scaling = RopeScaling::from_json(scaling, scaling_where);
}

}  // namespace

HfConfig HfConfig::from_json(const Json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "config.json must be a JSON object");
  HfConfig c;
  c.arch = parse_arch(json_required<std::string>(j, "model_type", where), where);
  c.hidden_size = json_required<int64_t>(j, "hidden_size", where);
  c.intermediate_size = json_required<int64_t>(j, "intermediate_size", where);
  c.num_hidden_layers = json_required<int64_t>(j, "num_hidden_layers", where);
  c.num_attention_heads = json_required<int64_t>(j, "num_attention_heads", where);
  c.num_key_value_heads =
      json_optional<int64_t>(j, "num_key_value_heads", c.num_attention_heads, where);
  c.vocab_size = json_required<int64_t>(j, "vocab_size", where);
  c.max_position_embeddings = json_required<int64_t>(j, "max_position_embeddings", where);
  c.rms_norm_eps = json_required<double>(j, "rms_norm_eps", where);
  c.rope_theta = json_optional<double>(j, "rope_theta", 10000.0, where);
  c.tie_word_embeddings = json_optional<bool>(j, "tie_word_embeddings", false, where);
  if (c.num_attention_heads <= 0) fail(where, "field 'num_attention_heads' must be positive");
  c.head_dim = json_optional<int64_t>(j, "head_dim", c.hidden_size / c.num_attention_heads, where);
  switch (c.arch) {
    case Arch::Qwen2:
      c.attention_bias = true;
      break;  // Qwen2 always has q/k/v bias
    case Arch::Llama:
    case Arch::Qwen3:
      c.attention_bias = json_optional<bool>(j, "attention_bias", false, where);
  }
  c.qk_norm = c.arch == Arch::Qwen3;
  read_rope(j, where, c);
  if (json_optional<bool>(j, "use_sliding_window", false, where)) {
    fail(where, "field 'use_sliding_window' = true is not supported");
  }
  if (j.contains("hidden_act") && j["hidden_act"] != "silu") {
    fail(where, "field 'hidden_act' must be \"silu\"");
  }
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) {
    c.bos_token_id = j["bos_token_id"].get<int64_t>();
  }
  c.eos_token_ids = read_eos(j, where);
  c.torch_dtype = json_optional<std::string>(j, "torch_dtype", "bfloat16", where);
  if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
    const Json& q = j["quantization_config"];
    const bool fp8 =
        q.is_object() && q.value("quant_method", Json()) == "fp8" &&
        q.value("fmt", Json("e4m3")) == "e4m3" &&
        q.value("weight_block_size", Json::array({128, 128})) == Json::array({128, 128});
    if (!fp8) {
      fail(where,
           "field 'quantization_config' is not supported: only FP8 E4M3 weights in 128x128 blocks "
           "({{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}})");
    }
    c.fp8_blocks = true;
  }
  c.validate(where);
  return c;
}

void HfConfig::validate(const std::string& where) const {
  auto in_range = [&](int64_t v, const char* name, int64_t max) {
    if (v <= 0) fail(where, "field '{}' must be positive, got {}", name, v);
    if (v > max) {
      fail(where, "field '{}' is {}, more than Trellis loads (at most {})", name, v, max);
    }
  };
  in_range(hidden_size, "hidden_size", kMaxHiddenSize);
  in_range(intermediate_size, "intermediate_size", kMaxIntermediateSize);
  in_range(num_hidden_layers, "num_hidden_layers", kMaxLayers);
  in_range(num_attention_heads, "num_attention_heads", kMaxHeads);
  in_range(num_key_value_heads, "num_key_value_heads", kMaxHeads);
  in_range(head_dim, "head_dim", kMaxHeadDim);
  in_range(vocab_size, "vocab_size", kMaxConfigVocabSize);
  in_range(max_position_embeddings, "max_position_embeddings", kMaxPositions);
  if (rope_scaling.original_max_position_embeddings) {
    in_range(*rope_scaling.original_max_position_embeddings, "original_max_position_embeddings",
             kMaxPositions);
  }
  if (head_dim % 2 != 0) fail(where, "field 'head_dim' must be even for RoPE, got {}", head_dim);
  if (max_position_embeddings * head_dim > kMaxRopeTableEntries) {
    fail(where,
         "max_position_embeddings ({}) x head_dim ({}) needs {:.1f} GiB of RoPE tables, above the "
         "{} GiB Trellis allows",
         max_position_embeddings, head_dim,
         static_cast<double>(max_position_embeddings * head_dim) * 4 / (1 << 30),
         kMaxRopeTableEntries * 4 >> 30);
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    fail(where, "num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
         num_attention_heads, num_key_value_heads);
  }
  if (!(std::isfinite(rms_norm_eps) && rms_norm_eps > 0)) {
    fail(where, "field 'rms_norm_eps' must be finite and positive");
  }
  if (!(std::isfinite(rope_theta) && rope_theta > 0)) {
    fail(where, "field 'rope_theta' must be finite and positive");
  }
}

HfConfig HfConfig::load(const std::filesystem::path& model_dir) {
  auto path = model_dir / "config.json";
  if (!std::filesystem::exists(path)) {
    fail(path.string(), "no config.json: is '{}' a Hugging Face model directory?",
         model_dir.string());
  }
  return from_json(read_json_file(path.string()), path.string());
}

Json HfConfig::to_json() const {
  Json j;
  static const char* kClass[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
  j["architectures"] = {kClass[static_cast<int>(arch)]};
  j["model_type"] = arch_name(arch);
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (arch != Arch::Qwen2) j["attention_bias"] = attention_bias;
  j["hidden_act"] = "silu";
  j["rope_scaling"] = rope_scaling.to_json();
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  if (eos_token_ids.size() > 1) j["eos_token_id"] = eos_token_ids;
  j["torch_dtype"] = torch_dtype;
  if (fp8_blocks) {
    j["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"activation_scheme", "dynamic"},
                                {"weight_block_size", {128, 128}}};
  }
  return j;
}

void HfConfig::save(const std::filesystem::path& model_dir) const {
  write_file_atomic(model_dir / "config.json", to_json().dump(2) + "\n");
}

std::vector<WeightShape> HfConfig::weight_shapes() const {
  const int64_t d = hidden_size, hd = head_dim, q = num_attention_heads * hd,
                kv = num_key_value_heads * hd;
  std::vector<WeightShape> out = {{"model.embed_tokens.weight", {vocab_size, d}}};
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {d}});
    out.push_back({p + "self_attn.q_proj.weight", {q, d}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, d}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, d}});
    if (attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}});
      out.push_back({p + "self_attn.k_proj.bias", {kv}});
      out.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    out.push_back({p + "self_attn.o_proj.weight", {d, q}});
    if (qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {hd}});
      out.push_back({p + "self_attn.k_norm.weight", {hd}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {d}});
    out.push_back({p + "mlp.gate_proj.weight", {intermediate_size, d}});
    out.push_back({p + "mlp.up_proj.weight", {intermediate_size, d}});
    out.push_back({p + "mlp.down_proj.weight", {d, intermediate_size}});
  }
  out.push_back({"model.norm.weight", {d}});
  if (!tie_word_embeddings) out.push_back({"lm_head.weight", {vocab_size, d}});
  return out;
}

int64_t HfConfig::num_parameters() const {
  const int64_t d = hidden_size, q = num_attention_heads * head_dim,
                kv = num_key_value_heads * head_dim;
  int64_t attn = d * q + 2 * d * kv + q * d;
  if (attention_bias) attn += q + 2 * kv;
  if (qk_norm) attn += 2 * head_dim;
  const int64_t mlp = 3 * d * intermediate_size;
  const int64_t norms = 2 * d;
  const int64_t embed = vocab_size * d * (tie_word_embeddings ? 1 : 2);
  return num_hidden_layers * (attn + mlp + norms) + d + embed;
}

int64_t HfConfig::num_matmul_parameters() const {
  const int64_t d = hidden_size, q = num_attention_heads * head_dim,
                kv = num_key_value_heads * head_dim;
  const int64_t per_layer = 2 * d * q + 2 * d * kv + 3 * d * intermediate_size;
  return num_hidden_layers * per_layer + vocab_size * d;
}

}  // namespace trellis::model
