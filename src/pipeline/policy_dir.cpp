#include "pipeline/policy_dir.h"

#include "rl/checkpoints.h"

namespace trellis::pipeline {
namespace fs = std::filesystem;

std::optional<std::pair<int64_t, fs::path>> newest_policy(const fs::path& dir,
                                                          int64_t max_version) {
  std::optional<std::pair<int64_t, fs::path>> newest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // step_<N>; temporary and old copies are hidden (".step_<N>.tmp").
    if (name.rfind("step_", 0) != 0 || name.size() == 5 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos || name.size() > 20)
      continue;
    const int64_t version = std::stoll(name.substr(5));
    if (version <= max_version && (!newest || version > newest->first))
      newest = std::make_pair(version, entry.path());
  }
  return newest;
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
