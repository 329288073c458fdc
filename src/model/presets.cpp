#include "model/presets.h"

#include "common/error.h"
#include "common/files.h"
#include "model/checkpoint.h"
#include "model/tokenizer.h"

namespace trellis::model {
namespace {

// Token ids of the byte-level tokenizer written by write_byte_level_tokenizer().
constexpr int64_t kEndOfText = 256, kImEnd = 258, kBeginOfText = 259, kEndOfTextLlama = 260,
                  kEotId = 263;
// 256 bytes + 8 specials, rounded up to a multiple of 64 as real checkpoints pad their vocab.
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
  if (arch == Arch::Llama) {
    c.bos_token_id = kBeginOfText;
    c.eos_token_ids = {kEotId, kEndOfTextLlama};
  } else {
    c.bos_token_id = kEndOfText;
    c.eos_token_ids = {kImEnd, kEndOfText};
  }
  return c;
}

void init_model_dir(const std::filesystem::path& dir, Arch arch, const std::string& preset,
                    uint64_t seed) {
  HfConfig config = preset_config(arch, preset);
  Transformer model(config, Compute{});
  model.init_random(seed);
  save_transformer(model, dir, StoreDtype::BF16);
  write_byte_level_tokenizer(dir, arch == Arch::Llama ? "llama3" : "chatml");
  Json gen;
  if (config.bos_token_id) gen["bos_token_id"] = *config.bos_token_id;
  gen["eos_token_id"] = config.eos_token_ids;
  write_file_atomic(dir / "generation_config.json", gen.dump(2) + "\n");
}

}  // namespace trellis::model
