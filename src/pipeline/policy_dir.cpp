#include "pipeline/policy_dir.h"

#include "rl/checkpoints.h"

namespace trellis::pipeline {
namespace fs = std::filesystem;

std::optional<std::pair<int64_t, fs::path>> newest_policy(const fs::path& dir,
                                                          int64_t max_version) {
  std::optional<std::pair<int64_t, fs::path>> newest;
  for (auto& [version, path] : rl::checkpoints_in(dir))  // ascending
    if (version <= max_version) newest = std::make_pair(version, path);
  return newest;
}

void publish_policy(const fs::path& dir, int64_t version, const model::Transformer& model,
                    const fs::path& base_model, int64_t keep) {
  rl::write_model_dir(model, base_model, dir / ("step_" + std::to_string(version)));
  rl::prune_checkpoints(dir, keep);
}

void remove_policies_after(const fs::path& dir, int64_t version) {
  for (const auto& [v, path] : rl::checkpoints_in(dir))
    if (v > version) fs::remove_all(path);
}

}  // namespace trellis::pipeline
