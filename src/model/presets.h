// Presets: the architectures `trellis model init` creates, and creating a fresh model directory
// in the Hugging Face layout (config.json, generation_config.json, safetensors, tokenizer).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/hf_config.h"

namespace trellis::model {

// tiny: ~1M parameters (tests). small: ~25M parameters, d = 512, 8 layers, GQA (demos, benches).
HfConfig preset_config(Arch arch, const std::string& preset);

// Writes a randomly initialised model (seeded) with a byte-level tokenizer whose chat format
// follows the architecture (ChatML for Qwen, Llama-3 headers for Llama). Weights are stored bf16.
// `vocab_size` > 0 pads the vocabulary to that many ids (a real checkpoint's LM head, 151,936
// for Qwen2, to measure its cost); it must hold the tokenizer's.
void init_model_dir(const std::filesystem::path& dir, Arch arch, const std::string& preset,
                    uint64_t seed, int64_t vocab_size = 0);

}  // namespace trellis::model
