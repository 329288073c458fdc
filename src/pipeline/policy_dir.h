// The policy directory: where the trainer publishes each policy version as a Hugging Face model
// directory `step_<v>` (fp32 weights; written under a temporary name and renamed into place, so a
// visible version is complete), and where workers look for the newest one. SHARDCAST replaces
// this shared directory with verified broadcast through relays.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "model/transformer.h"

namespace trellis::pipeline {

// The newest version in `dir` that is at most `max_version`, and its directory, if any. Workers
// pass the orchestrator's published version: a directory the trainer has written but not yet
// announced would make their uploads look sampled by a future policy.
std::optional<std::pair<int64_t, std::filesystem::path>> newest_policy(
    const std::filesystem::path& dir, int64_t max_version = INT64_MAX);

// Writes `model` as version `version` (tokenizer files copied from `base_model`) and removes all
// but the newest `keep` versions.
void publish_policy(const std::filesystem::path& dir, int64_t version,
                    const model::Transformer& model, const std::filesystem::path& base_model,
                    int64_t keep);

// Removes versions newer than `version` (a trainer resuming from an older checkpoint).
void remove_policies_after(const std::filesystem::path& dir, int64_t version);

}  // namespace trellis::pipeline
