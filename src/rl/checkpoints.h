// Checkpoints: training state on disk, one directory per step, so that a run resumes exactly.
//
//   <run>/checkpoints/step_<N>/
//     config.json, model.safetensors (fp32 master weights), tokenizer files, generation_config.json
//         — a Hugging Face model directory that `trellis generate --model` and `trellis eval` load;
//     optimizer/     — AdamW moments and step counts, one file per rank (rl/optimizer.h);
//     progress.json  — the step and whatever the loop needs to continue (pending rollouts, ...).
// A checkpoint is written under a temporary name and renamed into place, so a crash never leaves a
// half-written step_<N>; the newest `keep` are retained.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "common/json.h"
#include "model/transformer.h"
#include "rl/optimizer.h"

namespace trellis::rl {

// `model` as a complete Hugging Face directory at `out`: fp32 weights, config.json, and the
// tokenizer, chat-template and generation files copied from `base_model_dir`; `also` may add files.
// Everything is written under a temporary name beside `out` and renamed into place, so `out` is
// always either the old directory or the whole new one.
void write_model_dir(const model::Transformer& model, const std::filesystem::path& base_model_dir,
                     std::filesystem::path out,
                     const std::function<void(const std::filesystem::path& dir)>& also = {});

// Writes step_<step> under `checkpoints_dir` (write_model_dir plus optimizer/ and progress.json);
// tokenizer and generation files are copied from `base_model_dir`. Returns the checkpoint's
// directory. Collective when the optimizer has several ranks: rank 0 calls it while the others
// call optimizer.save.
std::filesystem::path save_checkpoint(const std::filesystem::path& checkpoints_dir, int64_t step,
                                      const model::Transformer& model, Optimizer& optimizer,
                                      const std::filesystem::path& base_model_dir,
                                      const Json& progress);

// Removes all but the newest `keep` step_<N> directories (keep <= 0: none removed).
void prune_checkpoints(const std::filesystem::path& checkpoints_dir, int64_t keep);

// Every step_<N> directory in `dir` as (N, path), by N ascending; none when `dir` is absent.
// Temporary and old copies (".step_<N>.tmp") are not listed.
std::vector<std::pair<int64_t, std::filesystem::path>> checkpoints_in(
    const std::filesystem::path& dir);

// The step_<N> directory with the largest N, if any.
std::optional<std::filesystem::path> latest_checkpoint(
    const std::filesystem::path& checkpoints_dir);

// progress.json of a checkpoint; loads its optimizer state into `optimizer` (the model's weights
// are loaded with model::load_transformer(checkpoint)). Error naming the file when one is missing
// or unreadable. Collective like save_checkpoint: the others call optimizer.load.
Json load_checkpoint_state(const std::filesystem::path& checkpoint, Optimizer& optimizer);

}  // namespace trellis::rl
