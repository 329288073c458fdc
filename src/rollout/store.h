// Rollout files by step on local disk (specs/rollout-format.md, Storage): one Parquet file per
// submission at <dir>/step_<s>/<node>-<submission>.parquet. The orchestrator keeps three such
// directories under its data_dir: the accepted files in rollouts/ (the rollout store proper),
// uploads waiting for a validator's verdict in validating/, and the files validators rejected in
// rejected/. The store holds bytes only; which file is in which state lives in the orchestrator's
// database (orchestrator/state.h), and the caller keeps the two in step.
//
// Names are checked before they touch the file system: a node is 64 lowercase hex digits (an
// Ed25519 address), a submission and a step are non-negative decimal integers, so no name can
// reach outside its step's directory. Writes are atomic and moves are renames (a data_dir is one
// file system), so a reader sees a whole file or none. Methods are safe to call from several
// threads (the last complete write of a name wins).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trellis::rollout {

// The parts of a file name "<node>-<submission>.parquet".
struct StoredName {
  std::string node_address;
  int64_t submission = 0;
};

// "<node>-<submission>.parquet"; Error naming `where` for a malformed node or a negative
// submission.
std::string stored_file_name(const std::string& node_address, int64_t submission,
                             const std::string& where);
// The inverse; Error naming `where` and what is wrong for anything but a well-formed name.
StoredName parse_stored_file_name(std::string_view name, const std::string& where);
// Whether `address` is 64 lowercase hex digits.
bool is_node_address(std::string_view address);

class RolloutStore {
 public:
  explicit RolloutStore(std::filesystem::path dir);

  const std::filesystem::path& dir() const { return dir_; }
  // <dir>/step_<step>/<name>, after checking step and name (Error naming the directory).
  std::filesystem::path path(int64_t step, std::string_view name) const;

  void write(int64_t step, std::string_view name, std::string_view bytes) const;  // atomic
  std::string read(int64_t step, std::string_view name) const;  // Error when absent
  bool contains(int64_t step, std::string_view name) const;
  void remove(int64_t step, std::string_view name) const;  // absent is fine
  // Renames the file to `to`, creating its directory and replacing a file already there. Error
  // naming both paths when it cannot (the file is absent, or `to` is on another file system).
  void move_to(int64_t step, std::string_view name, const std::filesystem::path& to) const;
  // Renames `from` to this store's (step, name), the same way.
  void move_from(const std::filesystem::path& from, int64_t step, std::string_view name) const;
  // Every well-formed file as (step, name), by step and name (temporary files of writes in
  // progress and strays are skipped).
  std::vector<std::pair<int64_t, std::string>> list() const;

 private:
  std::filesystem::path dir_;
};

}  // namespace trellis::rollout
