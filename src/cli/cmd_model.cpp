// `trellis model init` and `trellis model info`.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "common/logging.h"
#include "model/hf_config.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"

namespace trellis::cli {
namespace {

struct InitFlags {
  std::string arch = "qwen2", preset = "tiny", out;
  uint64_t seed = 0;
  int64_t vocab_size = 0;
};

void run_init(const InitFlags& f) {
  auto arch = model::parse_arch(f.arch, "--arch");
  model::init_model_dir(f.out, arch, f.preset, f.seed, f.vocab_size);
  auto config = model::HfConfig::load(f.out);
  std::printf("initialised %s/%s model (%.2fM parameters, seed %llu) in %s\n",
              model::arch_name(arch), f.preset.c_str(), config.num_parameters() / 1e6,
              static_cast<unsigned long long>(f.seed), f.out.c_str());
}

void run_info(const std::string& dir) {
  auto c = model::HfConfig::load(dir);
  auto st = model::SafetensorsModel::open_dir(dir);
  std::map<std::string, int64_t> by_dtype;
  int64_t stored = 0;
  for (const auto& name : st.names()) {
    const auto* t = st.find(name);
    by_dtype[std::string(model::dtype_name(t->dtype))] += t->numel();
    stored += t->numel();
  }
  std::printf("model         %s\n", dir.c_str());
  std::printf("architecture  %s (%d layers, hidden %lld, MLP %lld)\n", model::arch_name(c.arch),
              static_cast<int>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.intermediate_size));
  std::printf("attention     %lld heads, %lld kv heads, head_dim %lld%s%s\n",
              static_cast<long long>(c.num_attention_heads),
              static_cast<long long>(c.num_key_value_heads), static_cast<long long>(c.head_dim),
              c.attention_bias ? ", q/k/v bias" : "", c.qk_norm ? ", q/k norm" : "");
  std::printf("positions     %lld (RoPE theta %g, scaling %s)\n",
              static_cast<long long>(c.max_position_embeddings), c.rope_theta,
              c.rope_scaling.describe().c_str());
  std::printf("vocab         %lld%s\n", static_cast<long long>(c.vocab_size),
              c.tie_word_embeddings ? " (tied embeddings)" : "");
  std::printf("parameters    %lld (%.2fM)\n", static_cast<long long>(stored), stored / 1e6);
  std::string dtypes;
  for (const auto& [d, n] : by_dtype) {
    dtypes += (dtypes.empty() ? "" : ", ") + d + " " + std::to_string(n);
  }
  std::printf("dtypes        %s\n", dtypes.c_str());
  if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
    auto tok = model::Tokenizer::load(dir);
    std::string eos;
    for (int32_t id : tok.eos_ids()) eos += (eos.empty() ? "" : ", ") + std::to_string(id);
    std::printf("tokenizer     %d tokens, eos [%s]%s\n", tok.vocab_size(), eos.c_str(),
                tok.chat_template().empty() ? "" : ", chat template");
  }
}

}  // namespace

void add_model_commands(CLI::App& app) {
  auto* model = app.add_subcommand("model", "Create and inspect Hugging Face model directories");
  model->require_subcommand(1);

  static InitFlags init;
  auto* init_cmd = model->add_subcommand(
      "init", "Write a randomly initialised model (config.json, safetensors, tokenizer.json)");
  init_cmd->add_option("--arch", init.arch, "llama | qwen2 | qwen3")->capture_default_str();
  init_cmd->add_option("--preset", init.preset, "tiny (~1M params) | small (~25M params)")
      ->capture_default_str();
  init_cmd->add_option("--out", init.out, "output directory")->required();
  init_cmd->add_option("--seed", init.seed, "initialisation seed")->capture_default_str();
  init_cmd
      ->add_option("--vocab-size", init.vocab_size,
                   "pad the vocabulary to this many ids (e.g. 151936, Qwen2's LM head)")
      ->check(CLI::Range(int64_t{1}, model::kMaxConfigVocabSize));
  init_cmd->callback([] { run_init(init); });

  static std::string info_dir;
  auto* info = model->add_subcommand("info", "Print a model's architecture, size and dtypes");
  info->add_option("dir", info_dir, "model directory")->required();
  info->callback([] { run_info(info_dir); });
}

}  // namespace trellis::cli
