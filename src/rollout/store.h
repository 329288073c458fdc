// The local-directory rollout store (specs/rollout-format.md, Storage): one Parquet file per
// submission at <root>/rollouts/step_<s>/<node>-<submission>.parquet, written atomically so a
// reader sees a whole file or none. The store holds bytes only; which files are accepted lives in
// the orchestrator's state, and the trainer reads only those.
//
// Names are checked before they touch the file system: a node is 64 lowercase hex digits (an
// Ed25519 address), a submission and a step are non-negative decimal integers, so no name can
// reach outside its step's directory. Methods are safe to call from several threads (each file is
// written atomically; the last complete write of a name wins).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
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
  explicit RolloutStore(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }
  // <root>/rollouts/step_<step>/<name>, after checking step and name.
  std::filesystem::path path(int64_t step, std::string_view name) const;

  void write(int64_t step, std::string_view name, std::string_view bytes) const;  // atomic
  std::string read(int64_t step, std::string_view name) const;  // Error when absent
  bool contains(int64_t step, std::string_view name) const;
  void remove(int64_t step, std::string_view name) const;  // absent is fine
  // The well-formed file names under step_<step>/, sorted (temporary files are skipped).
  std::vector<std::string> list(int64_t step) const;
  // The steps that have a directory, ascending.
  std::vector<int64_t> steps() const;

 private:
  std::filesystem::path root_;
};

}  // namespace trellis::rollout
