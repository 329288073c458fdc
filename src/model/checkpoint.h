// Checkpoint: a Transformer to and from a Hugging Face model directory (config.json +
// model.safetensors or sharded safetensors + index). Weights are stored in bf16 by default (as HF
// models ship) or fp32 (bit-exact master weights, for resuming training).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "model/transformer.h"

namespace trellis::model {

enum class StoreDtype { BF16, F32 };

// Loads config.json and every parameter. Errors name the file and tensor: a missing tensor, a
// shape that does not match config.json, an unsupported dtype, an unexpected tensor.
std::unique_ptr<Transformer> load_transformer(const std::filesystem::path& dir,
                                              const Compute& compute);

// Writes config.json and the weights (atomically, file by file).
void save_transformer(const Transformer& model, const std::filesystem::path& dir,
                      StoreDtype dtype = StoreDtype::BF16, uint64_t max_shard_bytes = 5ull << 30);

}  // namespace trellis::model
