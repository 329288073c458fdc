#include "pipeline/policy_dir.h"

#include "rl/checkpoints.h"

namespace trellis::pipeline {
namespace fs = std::filesystem;

std::optional<std::pair<int64_t, fs::path>> newest_policy(const fs::path& dir) {
  const auto latest = rl::latest_checkpoint(dir);  // the same step_<N> naming
  if (!latest) return std::nullopt;
  return std::make_pair(std::stoll(latest->filename().string().substr(5)), *latest);
}

void publish_policy(const fs::path& dir, int64_t version, const model::Transformer& model,
                    const fs::path& base_model, int64_t keep) {
  rl::write_model_dir(model, base_model, dir / ("step_" + std::to_string(version)));
  rl::prune_checkpoints(dir, keep);
}

void remove_policies_after(const fs::path& dir, int64_t version) {
  while (auto newest = newest_policy(dir)) {
    if (newest->first <= version) break;
    fs::remove_all(newest->second);
  }
}

}  // namespace trellis::pipeline
