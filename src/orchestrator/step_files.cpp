#include "orchestrator/step_files.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include "common/error.h"
#include "common/files.h"
#include "rollout/store.h"

namespace trellis::orchestrator {
namespace {

void rename_file(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::create_directories(to.parent_path(), ec);
  if (ec) fail(to.parent_path().string(), "cannot create directory: {}", ec.message());
  std::filesystem::rename(from, to, ec);
  if (ec) fail(from.string(), "cannot move the file to {}: {}", to.string(), ec.message());
}

// "step_<n>" -> n; nothing for any other name.
std::optional<int64_t> step_of(const std::string& dir) {
  if (!dir.starts_with("step_") || dir.size() == 5 || dir.size() > 15) return std::nullopt;
  int64_t v = 0;
  const char* end = dir.data() + dir.size();
  const auto [p, ec] = std::from_chars(dir.data() + 5, end, v);
  if (ec != std::errc() || p != end || v < 0 || v > INT32_MAX) return std::nullopt;
  return v;
}

}  // namespace

StepFiles::StepFiles(std::filesystem::path root) : root_(std::move(root)) {}

std::filesystem::path StepFiles::path(int64_t step, std::string_view name) const {
  const std::string where = root_.string();
  if (step < 0 || step > INT32_MAX) fail(where, "step {} is out of range", step);
  rollout::parse_stored_file_name(name, where);
  return root_ / ("step_" + std::to_string(step)) / std::string(name);
}

void StepFiles::write(int64_t step, std::string_view name, std::string_view bytes) const {
  write_file_atomic(path(step, name), bytes);
}

std::string StepFiles::read(int64_t step, std::string_view name) const {
  const auto p = path(step, name);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) fail(p.string(), "no such rollout file");
  return read_file(p);
}

bool StepFiles::contains(int64_t step, std::string_view name) const {
  std::error_code ec;
  return std::filesystem::is_regular_file(path(step, name), ec);
}

void StepFiles::remove(int64_t step, std::string_view name) const {
  const auto p = path(step, name);
  std::error_code ec;
  std::filesystem::remove(p, ec);
  if (ec) fail(p.string(), "cannot remove the rollout file: {}", ec.message());
}

void StepFiles::move_to(int64_t step, std::string_view name,
                        const std::filesystem::path& to) const {
  rename_file(path(step, name), to);
}

void StepFiles::move_from(const std::filesystem::path& from, int64_t step,
                          std::string_view name) const {
  rename_file(from, path(step, name));
}

std::vector<std::pair<int64_t, std::string>> StepFiles::list() const {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(root_, ec)) return out;
  for (const auto& dir : std::filesystem::directory_iterator(root_, ec)) {
    const auto step = step_of(dir.path().filename().string());
    if (!step || !dir.is_directory()) continue;
    std::error_code dir_ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path(), dir_ec)) {
      const std::string name = entry.path().filename().string();
      try {
        rollout::parse_stored_file_name(name, "");
      } catch (const Error&) {
        continue;  // temporary files of writes in progress, strays
      }
      if (entry.is_regular_file()) out.emplace_back(*step, name);
    }
    if (dir_ec) fail(dir.path().string(), "cannot list the directory: {}", dir_ec.message());
  }
  if (ec) fail(root_.string(), "cannot list the directory: {}", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace trellis::orchestrator
