// Checkpoint: a Transformer to and from a Hugging Face model directory (config.json +
// model.safetensors or sharded safetensors + index). Weights are stored in bf16 by default (as HF
// models ship), fp32 (bit-exact master weights, for resuming training), or FP8: the decoder's
// linear weights as E4M3 codes with 128x128 block scales, the rest fp32 (an FP8 run's policy
// versions, docs/fp8.md).
//
// FP8 follows DeepSeek-V3's checkpoints: "<name>" is F8_E4M3 [out, in], "<name>_scale_inv" is F32
// [ceil(out / 128), ceil(in / 128)] and multiplies the codes back; config.json gets
// quantization_config. Loading sets each master to the dequantised values and hands the codes and
// scales to the model (Transformer::set_fp8_weight), so FP8 forwards use them as stored.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "model/transformer.h"

namespace trellis::model {

// FP8: the linear layers' weights as FP8 codes and block scales (model/fp8/), the rest fp32;
// FP8_BF16: the same with the rest bf16 (what an engine computing in bf16 uses of them).
enum class StoreDtype { BF16, F32, FP8, FP8_BF16 };

// Loads config.json and every parameter. Errors name the file and tensor: a missing tensor, a
// shape that does not match config.json, an unsupported dtype, an unexpected tensor.
std::unique_ptr<Transformer> load_transformer(const std::filesystem::path& dir,
                                              const Compute& compute);

// Writes config.json and the weights (atomically, file by file).
void save_transformer(const Transformer& model, const std::filesystem::path& dir,
                      StoreDtype dtype = StoreDtype::BF16, uint64_t max_shard_bytes = 5ull << 30);

}  // namespace trellis::model
