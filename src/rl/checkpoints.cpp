#include "rl/checkpoints.h"

#include <algorithm>
#include <charconv>
#include <system_error>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "model/checkpoint.h"

namespace trellis::rl {
namespace fs = std::filesystem;
namespace {

// The files besides config.json and the weights that make a model directory complete.
constexpr const char* kModelFiles[] = {"tokenizer.json",
                                       "tokenizer_config.json",
                                       "generation_config.json",
                                       "special_tokens_map.json",
                                       "chat_template.jinja",
                                       "vocab.json",
                                       "merges.txt",
                                       "added_tokens.json"};

std::optional<int64_t> step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind("step_", 0) != 0) return std::nullopt;
  int64_t step = 0;
  const char* first = name.data() + 5;
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last || first == last) return std::nullopt;
  return step;
}

}  // namespace

std::vector<std::pair<int64_t, fs::path>> checkpoints_in(const fs::path& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_directory()) continue;
    if (auto step = step_of(entry.path())) found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

void write_model_dir(const model::Transformer& model, const fs::path& base_model_dir, fs::path out,
                     const std::function<void(const fs::path& dir)>& also) {
  out = out.lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "dir/"
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  const std::string name = out.filename().string();
  const fs::path tmp = parent / ("." + name + ".tmp"), old = parent / ("." + name + ".old");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  model::save_transformer(model, tmp, model::StoreDtype::F32);
  for (const char* file : kModelFiles) {
    if (fs::exists(base_model_dir / file)) fs::copy_file(base_model_dir / file, tmp / file);
  }
  if (also) also(tmp);
  if (fs::exists(out)) {
    fs::remove_all(old);
    fs::rename(out, old);
    fs::rename(tmp, out);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, out);
  }
}

fs::path save_checkpoint(const fs::path& checkpoints_dir, int64_t step,
                         const model::Transformer& model, Optimizer& optimizer,
                         const fs::path& base_model_dir, const Json& progress) {
  const fs::path dir = checkpoints_dir / ("step_" + std::to_string(step));
  write_model_dir(model, base_model_dir, dir, [&](const fs::path& tmp) {
    optimizer.save(tmp);
    Json p = progress;
    p["step"] = step;
    write_file_atomic(tmp / "progress.json", p.dump(1) + "\n");
  });
  return dir;
}

void prune_checkpoints(const fs::path& checkpoints_dir, int64_t keep) {
  if (keep <= 0) return;
  auto found = checkpoints_in(checkpoints_dir);
  for (size_t i = 0; i + keep < found.size(); ++i) fs::remove_all(found[i].second);
}

std::optional<fs::path> latest_checkpoint(const fs::path& checkpoints_dir) {
  auto found = checkpoints_in(checkpoints_dir);
  if (found.empty()) return std::nullopt;
  return found.back().second;
}

Json load_checkpoint_state(const fs::path& checkpoint, Optimizer& optimizer) {
  const fs::path progress = checkpoint / "progress.json";
  if (!fs::exists(progress)) fail(progress.string(), "missing: not a training checkpoint");
  Json p = read_json_file(progress.string());
  if (!p.is_object() || !p.contains("step") || !p["step"].is_number_integer()) {
    fail(progress.string(), "no integer \"step\"");
  }
  optimizer.load(checkpoint);
  return p;
}

}  // namespace trellis::rl
