#include "model/presets.h"

#include "common/error.h"
#include "common/files.h"
#include "model/checkpoint.h"
#include "model/tokenizer.h"

namespace trellis::model {
namespace {

// The byte-level tokenizer's 256 bytes + 8 specials, rounded up to a multiple of 64 as real
// checkpoints pad their vocab.
constexpr int64_t kVocab = 320;

}  // namespace

HfConfig preset_config(Arch arch, const std::string& preset) {
  HfConfig c;
  c.arch = arch;
  c.vocab_size = kVocab;
  c.tie_word_embeddings = true;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = arch == Arch::Llama ? 500000.0 : 1000000.0;
  c.attention_bias = arch == Arch::Qwen2;
  c.qk_norm = arch == Arch::Qwen3;
  if (preset == "tiny") {
    c.hidden_size = 128;
    c.intermediate_size = 512;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 2048;
  } else if (preset == "small") {
    c.hidden_size = 512;
    c.intermediate_size = 1536;
    c.num_hidden_layers = 8;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.max_position_embeddings = 4096;
  } else {
    throw Error("unknown preset '" + preset + "' (use tiny or small)", "--preset");
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

void init_model_dir(const std::filesystem::path& dir, Arch arch, const std::string& preset,
                    uint64_t seed, int64_t vocab_size) {
  HfConfig config = preset_config(arch, preset);
  if (vocab_size > 0) config.vocab_size = vocab_size;
  const bool llama = arch == Arch::Llama;
  write_byte_level_tokenizer(dir, llama ? "llama3" : "chatml");
  // Special ids come from the tokenizer just written. As in the real checkpoints, Qwen uses
  // <|endoftext|> as bos and stops on it after <|im_end|>; Llama-3 stops on <|eot_id|> and
  // <|end_of_text|>.
  Tokenizer tok = Tokenizer::load(dir);
  auto id = [&](const char* token) { return static_cast<int64_t>(tok.token_to_id(token).value()); };
  const int64_t end_of_text = id(llama ? "<|end_of_text|>" : "<|endoftext|>");
  config.bos_token_id = llama ? id("<|begin_of_text|>") : end_of_text;
  config.eos_token_ids = {tok.eos_ids().at(0), end_of_text};
  if (tok.vocab_size() > config.vocab_size) {
    throw Error(fmt::format("tokenizer has {} tokens, more than the vocab size {}",
                            tok.vocab_size(), config.vocab_size),
                dir.string());
  }
  Transformer model(config, Compute{});
  model.init_random(seed);
  save_transformer(model, dir, StoreDtype::BF16);
  Json gen;
  if (config.bos_token_id) gen["bos_token_id"] = *config.bos_token_id;
  gen["eos_token_id"] = config.eos_token_ids;
  write_file_atomic(dir / "generation_config.json", gen.dump(2) + "\n");
}

}  // namespace trellis::model
