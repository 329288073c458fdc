// Checkpoint and config tests: save -> load round trips and every corrupt-input error path of a
// model directory, each asserting the message names what is wrong and where.
#include "model/checkpoint.h"

#include <cmath>
#include <functional>
#include <span>

#include <limits>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "common/exception_message.h"
#include "common/files.h"
#include "error_of.h"
#include "model/fp8/e4m3.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "peak_rss.h"

namespace trellis::model {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::peak_rss;

fs::path temp_dir(const std::string& name) {
  auto dir =
      fs::temp_directory_path() / ("trellis_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

torch::Tensor logits_of(Transformer& m) {
  torch::NoGradGuard g;
  return m.forward(torch::arange(0, 40, 3, torch::kInt64)).logits;
}

TEST(Checkpoint, Fp32SaveLoadGivesIdenticalLogits) {
  for (Arch arch : {Arch::Llama, Arch::Qwen2, Arch::Qwen3}) {
    auto dir = temp_dir(std::string("f32_") + arch_name(arch));
    HfConfig c = preset_config(arch, "tiny");
    c.tie_word_embeddings = arch != Arch::Llama;  // cover the untied LM head too
    if (arch == Arch::Qwen3) {  // and a rope_scaling, which must survive the round trip
      c.rope_scaling.type = RopeType::Yarn;
      c.rope_scaling.factor = 4;
      c.rope_scaling.original_max_position_embeddings = 256;
    }
    Transformer m(c, Compute{});
    m.init_random(3);
    save_transformer(m, dir, StoreDtype::F32);
    auto loaded = load_transformer(dir, Compute{});
    EXPECT_TRUE(torch::equal(logits_of(m), logits_of(*loaded))) << arch_name(arch);
    EXPECT_EQ(loaded->config().to_json(), [&] {
      HfConfig want = c;
      want.torch_dtype = "float32";
      return want.to_json();
    }());
  }
}

TEST(Checkpoint, Bf16SaveIsStableAndShardedLoadsTheSame) {
  auto dir = temp_dir("bf16");
  Transformer m(preset_config(Arch::Qwen2, "tiny"), Compute{});
  m.init_random(4);
  save_transformer(m, dir, StoreDtype::BF16);
  auto once = load_transformer(dir, Compute{});
  // Rounding to bf16 happens once: a second save/load of the loaded model changes nothing.
  auto dir2 = temp_dir("bf16_sharded");
  save_transformer(*once, dir2, StoreDtype::BF16, /*max_shard_bytes=*/200000);
  EXPECT_TRUE(fs::exists(dir2 / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir2 / "model.safetensors"));
  auto twice = load_transformer(dir2, Compute{});
  EXPECT_TRUE(torch::equal(logits_of(*once), logits_of(*twice)));
  // and bf16 storage stays close to the fp32 original
  auto diff = (logits_of(m) - logits_of(*once)).abs().max().item<double>();
  EXPECT_LT(diff, 0.05);
}

TEST(Checkpoint, ShapeNotMatchingConfigIsAnError) {
  auto dir = temp_dir("shape");
  init_model_dir(dir, Arch::Qwen2, "tiny", 0);
  auto j = read_json_file((dir / "config.json").string());
  j["intermediate_size"] = 256;
  write_file_atomic(dir / "config.json", j.dump());
  auto msg = error_of([&] { load_transformer(dir, Compute{}); });
  EXPECT_NE(msg.find("mlp.gate_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has shape [512, 128] but config.json implies [256, 128]"), std::string::npos)
      << msg;
}

TEST(Checkpoint, APaddedVocabularyLoadsAndMustHoldTheTokenizer) {
  auto dir = temp_dir("padded");
  init_model_dir(dir, Arch::Qwen2, "tiny", 0, 1000);
  auto m = load_transformer(dir, Compute{});
  EXPECT_EQ(m->config().vocab_size, 1000);
  auto logits = m->forward(torch::tensor({1, 2, 3}, torch::kInt64)).logits;
  EXPECT_EQ(logits.size(-1), 1000);
  // The byte-level tokenizer has 264 tokens.
  auto msg = error_of([&] { init_model_dir(temp_dir("too_small"), Arch::Qwen2, "tiny", 0, 200); });
  EXPECT_NE(msg.find("tokenizer has 264 tokens, more than the vocab size 200"), std::string::npos)
      << msg;
}

TEST(Checkpoint, AConfigLargerThanItsWeightsIsRefusedBeforeTheModelIsAllocated) {
  // A 320-token embedding under a config.json that claims 2M tokens: the model of that config
  // holds 1 GiB of fp32 embedding, which the loader allocated before it compared shapes.
  auto dir = temp_dir("larger");
  init_model_dir(dir, Arch::Qwen2, "tiny", 0);
  auto j = read_json_file((dir / "config.json").string());
  j["vocab_size"] = int64_t{1} << 21;
  write_file_atomic(dir / "config.json", j.dump());
  const int64_t before = peak_rss();
  auto msg = error_of([&] { load_transformer(dir, Compute{}); });
  EXPECT_NE(msg.find("tensor 'model.embed_tokens.weight' has shape [320, 128] but config.json "
                     "implies [2097152, 128]"),
            std::string::npos)
      << msg;
  EXPECT_LT(peak_rss() - before, int64_t{256} << 20);
}

TEST(Checkpoint, MissingAndUnexpectedTensorsAreErrors) {
  auto dir = temp_dir("missing");
  HfConfig c = preset_config(Arch::Llama, "tiny");
  Transformer m(c, Compute{});
  save_transformer(m, dir, StoreDtype::F32);
  // Llama has no q/k/v bias: declaring one makes the checkpoint lack it.
  auto j = read_json_file((dir / "config.json").string());
  j["attention_bias"] = true;
  write_file_atomic(dir / "config.json", j.dump());
  auto msg = error_of([&] { load_transformer(dir, Compute{}); });
  EXPECT_NE(msg.find("missing tensor 'model.layers.0.self_attn.q_proj.bias'"), std::string::npos)
      << msg;
  // The other way round: a Qwen2 checkpoint (with biases) read as Llama has unexpected tensors.
  auto dir2 = temp_dir("unexpected");
  init_model_dir(dir2, Arch::Qwen2, "tiny", 0);
  auto j2 = read_json_file((dir2 / "config.json").string());
  j2["model_type"] = "llama";
  write_file_atomic(dir2 / "config.json", j2.dump());
  msg = error_of([&] { load_transformer(dir2, Compute{}); });
  EXPECT_NE(msg.find("unexpected tensor"), std::string::npos) << msg;
  EXPECT_NE(msg.find(".bias"), std::string::npos) << msg;
}

torch::Tensor fp8_logits_of(Transformer& m) {
  torch::NoGradGuard g;
  return m.forward(torch::arange(0, 40, 3, torch::kInt64), {.fp8 = true}).logits;
}

// The model directory `from` written again to `to` with `edit` applied to its tensor list.
void rewrite(const fs::path& from, const fs::path& to,
             const std::function<void(std::vector<TensorData>&)>& edit) {
  const SafetensorsModel st = SafetensorsModel::open_dir(from);
  std::vector<TensorData> tensors;
  for (const auto& name : st.names()) {
    const TensorInfo* info = st.find(name);
    tensors.push_back({name, info->dtype, info->shape, st.data(name)});
  }
  edit(tensors);
  fs::create_directories(to);
  write_safetensors_dir(to, tensors);
  fs::copy_file(from / "config.json", to / "config.json", fs::copy_options::overwrite_existing);
}

TEST(Checkpoint, Fp8StoresCodesAndScalesThatLoadAsTheyWere) {
  const auto dir = temp_dir("fp8");
  HfConfig c = preset_config(Arch::Qwen3, "tiny");
  c.intermediate_size = 320;  // partial 128x128 blocks in gate, up and down
  Transformer m(c, Compute{});
  m.init_random(5);
  save_transformer(m, dir, StoreDtype::FP8);

  const SafetensorsModel st = SafetensorsModel::open_dir(dir);
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  const std::string down = "model.layers.1.mlp.down_proj.weight";
  EXPECT_EQ(st.find(q)->dtype, DType::F8_E4M3);
  EXPECT_EQ(st.find(down)->dtype, DType::F8_E4M3);
  EXPECT_EQ(st.find(down + "_scale_inv")->shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(st.find("model.embed_tokens.weight")->dtype, DType::F32) << "only the linear layers";
  EXPECT_EQ(st.find("model.layers.0.input_layernorm.weight")->dtype, DType::F32);
  EXPECT_EQ(st.data(down).size(), static_cast<size_t>(128 * 320)) << "one byte a weight";
  EXPECT_EQ(read_json_file((dir / "config.json").string())["quantization_config"]["quant_method"],
            "fp8");

  // The loaded model's FP8 forward is the original's, bit for bit: the codes and scales are the
  // ones stored, not quantised again from the dequantised masters.
  auto loaded = load_transformer(dir, Compute{});
  EXPECT_TRUE(loaded->config().fp8_blocks);
  EXPECT_TRUE(torch::equal(fp8_logits_of(*loaded), fp8_logits_of(m)));
  for (const auto& name : {q, down}) {
    EXPECT_TRUE(torch::equal(loaded->fp8_blocks(name).codes, m.fp8_blocks(name).codes)) << name;
    EXPECT_TRUE(torch::equal(loaded->fp8_blocks(name).scales, m.fp8_blocks(name).scales)) << name;
  }
  // ... and so is that of a model the loaded weights are copied into (a worker's next version).
  Transformer engine_model(c, Compute{});
  engine_model.copy_weights_from(*loaded);
  EXPECT_TRUE(torch::equal(fp8_logits_of(engine_model), fp8_logits_of(m)));
  // Stored codes and scales are used as they are, not quantised again: halve one weight's codes
  // under the same scales (a valid encoding, but not the one amax / 448 gives).
  const auto halved_dir = temp_dir("fp8_halved");
  const torch::Tensor halved =
      fp8::encode_e4m3(fp8::decode_e4m3(m.fp8_blocks(q).codes) / 2).contiguous();
  rewrite(dir, halved_dir, [&](std::vector<TensorData>& tensors) {
    for (auto& t : tensors)
      if (t.name == q)
        t.bytes = {static_cast<const std::byte*>(halved.data_ptr()),
                   static_cast<size_t>(halved.nbytes())};
  });
  const auto halved_model = load_transformer(halved_dir, Compute{});
  EXPECT_TRUE(torch::equal(halved_model->fp8_blocks(q).codes, halved));
  EXPECT_TRUE(torch::equal(halved_model->fp8_blocks(q).scales, m.fp8_blocks(q).scales));
  // Saved again as FP8, the same bytes.
  const auto again = temp_dir("fp8_again");
  save_transformer(*loaded, again, StoreDtype::FP8);
  const SafetensorsModel st2 = SafetensorsModel::open_dir(again);
  for (const auto& name : st.names()) {
    ASSERT_NE(st2.find(name), nullptr) << name;
    const auto a = st.data(name), b = st2.data(name);
    EXPECT_TRUE(a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin())) << name;
  }
}

// FP8_BF16 (what the trainer publishes when it computes in bf16): the same codes and scales, the
// rest bf16, loading as the model's bf16-rounded masters.
TEST(Checkpoint, Fp8WithTheRestInBf16KeepsTheCodesAndRoundsTheRest) {
  const auto dir = temp_dir("fp8_bf16");
  HfConfig c = preset_config(Arch::Qwen3, "tiny");
  Transformer m(c, Compute{});
  m.init_random(8);
  save_transformer(m, dir, StoreDtype::FP8_BF16);
  const SafetensorsModel st = SafetensorsModel::open_dir(dir);
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  EXPECT_EQ(st.find(q)->dtype, DType::F8_E4M3);
  EXPECT_EQ(st.find(q + "_scale_inv")->dtype, DType::F32);
  EXPECT_EQ(st.find("model.embed_tokens.weight")->dtype, DType::BF16);
  EXPECT_EQ(st.find("model.layers.0.input_layernorm.weight")->dtype, DType::BF16);
  const auto loaded = load_transformer(dir, Compute{});
  EXPECT_TRUE(loaded->config().fp8_blocks);
  EXPECT_TRUE(torch::equal(loaded->fp8_blocks(q).codes, m.fp8_blocks(q).codes));
  EXPECT_TRUE(torch::equal(loaded->fp8_blocks(q).scales, m.fp8_blocks(q).scales));
  std::map<std::string, torch::Tensor> params(m.named_parameters().begin(),
                                              m.named_parameters().end());
  for (const auto& [name, p] : loaded->named_parameters()) {
    if (name.find("_proj") != std::string::npos) continue;
    EXPECT_TRUE(torch::equal(p, params.at(name).to(torch::kBFloat16).to(torch::kFloat32))) << name;
  }
}

TEST(Checkpoint, Fp8TensorsWithoutSoundScalesAreNamedErrors) {
  const auto dir = temp_dir("fp8_bad_src");
  Transformer m(preset_config(Arch::Llama, "tiny"), Compute{});
  m.init_random(6);
  save_transformer(m, dir, StoreDtype::FP8);
  const std::string w = "model.layers.0.mlp.up_proj.weight", scale = w + "_scale_inv";
  const std::vector<float> nan_scales(4, std::nanf(""));
  const std::vector<float> wide(8, 1.0f);
  struct Case {
    const char* name;
    std::function<void(std::vector<TensorData>&)> edit;
    std::string expected;
  };
  for (const Case& k : std::vector<Case>{
           {"missing",
            [&](auto& t) {
              std::erase_if(t, [&](const TensorData& d) { return d.name == scale; });
            },
            "has no '" + scale + "'"},
           {"shape",
            [&](auto& t) {
              for (auto& d : t)
                if (d.name == scale)
                  d = {scale,
                       DType::F32,
                       {1, 8},
                       std::as_bytes(std::span<const float>(wide.data(), wide.size()))};
            },
            "'" + scale + "' must be F32 [4, 1]"},
           {"nan",
            [&](auto& t) {
              for (auto& d : t)
                if (d.name == scale)
                  d.bytes = std::as_bytes(std::span<const float>(nan_scales.data(), 4));
            },
            "not finite and positive"},
       }) {
    const auto bad = temp_dir(std::string("fp8_bad_") + k.name);
    rewrite(dir, bad, k.edit);
    const auto msg = error_of([&] { load_transformer(bad, Compute{}); });
    EXPECT_NE(msg.find(k.expected), std::string::npos) << k.name << ": " << msg;
  }
  auto j = preset_config(Arch::Llama, "tiny").to_json();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}};
  EXPECT_NE(error_of([&] { HfConfig::from_json(j, "c"); }).find("quantization_config"),
            std::string::npos);
  j["quantization_config"] = {{"quant_method", "gptq"}};
  EXPECT_NE(error_of([&] { HfConfig::from_json(j, "c"); }).find("quantization_config"),
            std::string::npos);
}

TEST(HfConfigTest, MissingOrUnsupportedFieldsAreErrors) {
  auto good = preset_config(Arch::Qwen3, "tiny").to_json();
  EXPECT_NO_THROW(HfConfig::from_json(good, "config.json"));
  for (const char* field : {"hidden_size", "num_hidden_layers", "vocab_size", "rms_norm_eps",
                            "model_type", "intermediate_size", "max_position_embeddings"}) {
    auto j = good;
    j.erase(field);
    auto msg = error_of([&] { HfConfig::from_json(j, "dir/config.json"); });
    EXPECT_NE(msg.find(std::string("missing field '") + field + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dir/config.json"), std::string::npos) << msg;
  }
  auto j = good;
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 4.0}};
  EXPECT_NE(error_of([&] { HfConfig::from_json(j, "c"); }).find("rope_scaling"), std::string::npos);
  j = good;
  j["model_type"] = "mistral";
  EXPECT_NE(error_of([&] { HfConfig::from_json(j, "c"); }).find("unsupported model_type 'mistral'"),
            std::string::npos);
  j = good;
  j["hidden_size"] = "512";
  EXPECT_NE(error_of([&] { HfConfig::from_json(j, "c"); }).find("'hidden_size' has the wrong type"),
            std::string::npos);
  j = good;
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of([&] { HfConfig::from_json(j, "c"); }).find("multiple of num_key_value_heads"),
            std::string::npos);
}

TEST(HfConfigTest, DimensionsBeyondEveryRealModelAreRefused) {
  const Json good = preset_config(Arch::Qwen3, "tiny").to_json();
  const std::vector<std::pair<const char*, int64_t>> too_large = {
      {"hidden_size", kMaxHiddenSize * 2},     {"intermediate_size", kMaxIntermediateSize + 1},
      {"num_hidden_layers", kMaxLayers + 1},   {"num_attention_heads", int64_t{1} << 62},
      {"num_key_value_heads", kMaxHeads * 2},  {"head_dim", kMaxHeadDim + 2},
      {"vocab_size", kMaxConfigVocabSize + 1}, {"max_position_embeddings", kMaxPositions + 1}};
  for (const auto& [field, value] : too_large) {
    Json j = good;
    j[field] = value;
    const std::string msg = error_of([&] { HfConfig::from_json(j, "dir/config.json"); });
    EXPECT_NE(msg.find(fmt::format("field '{}' is {}, more than Trellis loads", field, value)),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("dir/config.json"), std::string::npos) << msg;
  }
  Json j = good;
  j["max_position_embeddings"] = kMaxPositions;
  j["head_dim"] = 256;
  EXPECT_NE(error_of([&] { HfConfig::from_json(j, "c"); }).find("GiB of RoPE tables"),
            std::string::npos);
  j = good;
  j["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", 4.0},
                       {"original_max_position_embeddings", kMaxPositions + 1}};
  EXPECT_NE(error_of([&] {
              HfConfig::from_json(j, "c");
            }).find("field 'original_max_position_embeddings' is 16777217"),
            std::string::npos);
  j = good;
  j["rms_norm_eps"] = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_of([&] { HfConfig::from_json(j, "c"); }).find("'rms_norm_eps' must be finite"),
            std::string::npos);
}

TEST(HfConfigTest, TheLargestPublicModelsLoad) {
  // Llama-3.1-405B's config.json (trimmed), and its published parameter count.
  auto j = Json::parse(R"({
    "model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248,
    "num_hidden_layers": 126, "num_attention_heads": 128, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "tie_word_embeddings": false, "hidden_act": "silu",
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  EXPECT_EQ(HfConfig::from_json(j, "405b").num_parameters(), int64_t{405'853'388'800});
  // Llama 4 Scout's ten-million-token context, at its head_dim of 128.
  j["max_position_embeddings"] = 10'485'760;
  j["head_dim"] = 128;
  EXPECT_NO_THROW(HfConfig::from_json(j, "scout"));
}

TEST(HfConfigTest, TheWeightShapesHoldEveryParameterOnce) {
  for (Arch arch : {Arch::Llama, Arch::Qwen2, Arch::Qwen3}) {
    for (bool tied : {false, true}) {
      HfConfig c = preset_config(arch, "tiny");
      c.tie_word_embeddings = tied;
      c.attention_bias = arch != Arch::Llama;
      int64_t total = 0;
      std::set<std::string> names;
      for (const WeightShape& w : c.weight_shapes()) {
        int64_t n = 1;
        for (int64_t dim : w.shape) n *= dim;
        total += n;
        EXPECT_TRUE(names.insert(w.name).second) << w.name;
      }
      EXPECT_EQ(total, c.num_parameters()) << arch_name(arch) << " tied " << tied;
      EXPECT_EQ(names.count("lm_head.weight"), tied ? 0u : 1u);
    }
  }
}

TEST(ErrorMessages, ALibtorchErrorIsShownWithoutItsBacktrace) {
  try {
    auto t = torch::empty({int64_t{1} << 62, 8});
    FAIL() << "libtorch allocated " << t.numel() << " elements";
  } catch (const std::exception& e) {
    ASSERT_NE(std::string(e.what()).find("frame #"), std::string::npos) << e.what();
    const std::string shown = message_of(e);
    EXPECT_NE(shown.find("overflow"), std::string::npos) << shown;
    EXPECT_EQ(shown.find('\n'), std::string::npos) << shown;
  }
}

TEST(HfConfigTest, ReadsRealWorldFields) {
  // The shape of a real Qwen2.5-0.5B config.json (trimmed): head_dim derived, bias implied.
  auto j = Json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "eos_token_id": 151645,
    "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
    "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
  auto c = HfConfig::from_json(j, "qwen");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_NEAR(c.num_parameters() / 1e6, 494.0, 1.0);  // Qwen2.5-0.5B has 494M parameters
}

}  // namespace
}  // namespace trellis::model
