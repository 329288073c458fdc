// Rollout files by step outside the rollout store: <root>/step_<s>/<node>-<submission>.parquet.
// The orchestrator keeps uploads that wait for a validator's verdict under <data_dir>/validating/
// and the files validators rejected under <data_dir>/rejected/ (the accepted ones live in the
// rollout store, rollout/store.h, under <data_dir>/rollouts/). Names are checked like the store's,
// so no name reaches outside its step's directory. Writes are atomic and moves are renames (every
// area lives under one data_dir, on one file system), so a reader sees a whole file or none.
// Safe to call from several threads; which file is in which state is the database's business
// (state.h), and the caller keeps the two in step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trellis::orchestrator {

class StepFiles {
 public:
  explicit StepFiles(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }
  // <root>/step_<step>/<name>, after checking step and name (Error naming the area otherwise).
  std::filesystem::path path(int64_t step, std::string_view name) const;

  void write(int64_t step, std::string_view name, std::string_view bytes) const;  // atomic
  std::string read(int64_t step, std::string_view name) const;  // Error when absent
  bool contains(int64_t step, std::string_view name) const;
  void remove(int64_t step, std::string_view name) const;  // absent is fine
  // Renames the file to `to`, creating its directory and replacing a file already there. Error
  // naming both paths when it cannot (the file is absent, or `to` is on another file system).
  void move_to(int64_t step, std::string_view name, const std::filesystem::path& to) const;
  // Renames `from` to this area's (step, name), the same way.
  void move_from(const std::filesystem::path& from, int64_t step, std::string_view name) const;
  // Every well-formed file as (step, name), by step and name (temporary files are skipped).
  std::vector<std::pair<int64_t, std::string>> list() const;

 private:
  std::filesystem::path root_;
};

}  // namespace trellis::orchestrator
