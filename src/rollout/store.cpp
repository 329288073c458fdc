#include "rollout/store.h"

#include <algorithm>
#include <charconv>
#include <cstdint>

#include "common/error.h"
#include "common/files.h"

namespace trellis::rollout {
namespace {

constexpr std::string_view kSuffix = ".parquet";

// A non-negative decimal integer without sign or leading zeros, at most int32's range.
bool parse_count(std::string_view text, int64_t& out) {
  if (text.empty() || text.size() > 10 || (text.size() > 1 && text[0] == '0')) return false;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0 || v > INT32_MAX) return false;
  out = v;
  return true;
}

void rename_file(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::create_directories(to.parent_path(), ec);
  if (ec) fail(to.parent_path().string(), "cannot create directory: {}", ec.message());
  std::filesystem::rename(from, to, ec);
  if (ec) fail(from.string(), "cannot move the file to {}: {}", to.string(), ec.message());
}

}  // namespace

bool is_node_address(std::string_view address) {
  return address.size() == 64 && std::all_of(address.begin(), address.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string stored_file_name(const std::string& node_address, int64_t submission,
                             const std::string& where) {
  if (!is_node_address(node_address)) {
    fail(where, "a node address is 64 lowercase hex digits (an Ed25519 public key), got '{}'",
         node_address.substr(0, 80));
  }
  if (submission < 0 || submission > INT32_MAX) {
    fail(where, "submission {} is out of range [0, {}]", submission, INT32_MAX);
  }
  return node_address + "-" + std::to_string(submission) + std::string(kSuffix);
}

StoredName parse_stored_file_name(std::string_view name, const std::string& where) {
  const auto bad = [&](const char* why) {
    fail(where, "'{}' is not a rollout file name <node>-<submission>.parquet: {}",
         name.substr(0, 200), why);
  };
  if (!name.ends_with(kSuffix)) bad("it does not end in .parquet");
  const std::string_view stem = name.substr(0, name.size() - kSuffix.size());
  const size_t dash = stem.find('-');
  if (dash == std::string_view::npos) bad("there is no '-' between node and submission");
  StoredName out;
  out.node_address = std::string(stem.substr(0, dash));
  if (!is_node_address(out.node_address)) bad("the node is not 64 lowercase hex digits");
  if (!parse_count(stem.substr(dash + 1), out.submission)) {
    bad("the submission is not a non-negative integer");
  }
  return out;
}

RolloutStore::RolloutStore(std::filesystem::path dir) : dir_(std::move(dir)) {}

std::filesystem::path RolloutStore::path(int64_t step, std::string_view name) const {
  const std::string where = dir_.string();
  if (step < 0 || step > INT32_MAX) fail(where, "step {} is out of range", step);
  parse_stored_file_name(name, where);
  return dir_ / ("step_" + std::to_string(step)) / std::string(name);
}

void RolloutStore::write(int64_t step, std::string_view name, std::string_view bytes) const {
  write_file_atomic(path(step, name), bytes);
}

std::string RolloutStore::read(int64_t step, std::string_view name) const {
  const auto p = path(step, name);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) fail(p.string(), "no such rollout file");
  return read_file(p);
}

bool RolloutStore::contains(int64_t step, std::string_view name) const {
  std::error_code ec;
  return std::filesystem::is_regular_file(path(step, name), ec);
}

void RolloutStore::remove(int64_t step, std::string_view name) const {
  const auto p = path(step, name);
  std::error_code ec;
  std::filesystem::remove(p, ec);
  if (ec) fail(p.string(), "cannot remove the rollout file: {}", ec.message());
}

void RolloutStore::move_to(int64_t step, std::string_view name,
                           const std::filesystem::path& to) const {
  rename_file(path(step, name), to);
}

void RolloutStore::move_from(const std::filesystem::path& from, int64_t step,
                             std::string_view name) const {
  rename_file(from, path(step, name));
}

std::vector<std::pair<int64_t, std::string>> RolloutStore::list() const {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_, ec)) return out;
  for (const auto& step_dir : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string dir_name = step_dir.path().filename().string();
    int64_t step = 0;
    if (!dir_name.starts_with("step_") || !parse_count(dir_name.substr(5), step) ||
        !step_dir.is_directory()) {
      continue;
    }
    std::error_code files_ec;
    for (const auto& entry : std::filesystem::directory_iterator(step_dir.path(), files_ec)) {
      const std::string name = entry.path().filename().string();
      try {
        parse_stored_file_name(name, "");
      } catch (const Error&) {
        continue;  // temporary files of writes in progress, strays
      }
      if (entry.is_regular_file()) out.emplace_back(step, name);
    }
    if (files_ec)
      fail(step_dir.path().string(), "cannot list the directory: {}", files_ec.message());
  }
  if (ec) fail(dir_.string(), "cannot list the directory: {}", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace trellis::rollout
