// The orchestrator's durable state, in one SQLite database (<data_dir>/orchestrator.sqlite, WAL,
// synchronous=FULL, one transaction per change) so that a crash or restart loses no decision:
//   meta         run_id (fixed when the database is created), the URL-signing secret, the newest
//                published policy version
//   submissions  one row per upload request: (step, node, submission), the declared sha256 and
//                size, status pending -> accepted | rejected (with the reason), what an accepted
//                file holds (samples, signal samples, completion tokens), request and decision
//                times, and the acceptance order
// A (step, node, submission) is accepted at most once (a unique index enforces it); rejected
// rows stay as history, and a node may ask again for a submission that was not accepted.
//
// Thread-safe: one connection behind a mutex.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "orchestrator/step_counter.h"

struct sqlite3;

namespace trellis::orchestrator {

struct SubmissionKey {
  int64_t step = 0;
  std::string node_address;
  int64_t submission = 0;
};

struct Submission {
  int64_t id = 0;
  SubmissionKey key;
  std::string sha256;
  int64_t size = 0;
  std::string status;                     // pending | accepted | rejected
  std::string reason;                     // why it was rejected
  FileCounts counts;                      // of an accepted file
  double created_at = 0, decided_at = 0;  // unix seconds; decided_at 0 while pending
};

class State {
 public:
  // Opens (creating if needed) the database at `path`. A new database records `run_id` and a
  // fresh random URL-signing secret; an existing one keeps its own (the run ID is fixed at the
  // first start). Error naming the path when it cannot be opened or is not this schema.
  State(const std::filesystem::path& path, const std::string& run_id);
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  const std::string& run_id() const { return run_id_; }
  const std::string& url_secret() const { return url_secret_; }

  int64_t policy_version();
  // Records `version` when newer than the current one; returns the newest.
  int64_t publish_version(int64_t version);

  // Records a pending request for `key`, or refreshes the pending one (declared hash, size,
  // time). False (and nothing recorded) when `key` is already accepted.
  bool request(const SubmissionKey& key, const std::string& sha256, int64_t size, double now);
  // The newest row for `key`, if any.
  std::optional<Submission> latest(const SubmissionKey& key);
  bool is_accepted(const SubmissionKey& key);
  // The pending row of `key` becomes accepted (false when there is none: decided meanwhile).
  bool accept(const SubmissionKey& key, const FileCounts& counts, double now);
  // The pending row of `key` becomes rejected with `reason` (false when there is none).
  bool reject(const SubmissionKey& key, const std::string& reason, double now);

  // A step's accepted submissions in acceptance order.
  std::vector<Submission> accepted(int64_t step);
  // Accepted signal samples per step (steps without any are absent).
  std::map<int64_t, int64_t> signal_samples_by_step();
  // Submissions per status (pending, accepted, rejected; each present).
  std::map<std::string, int64_t> count_by_status();
  // Totals over accepted submissions.
  FileCounts accepted_totals();
  // Completion tokens of submissions accepted at or after `since` (unix seconds).
  int64_t completion_tokens_since(double since);

 private:
  void exec(const char* sql);
  std::string meta(const std::string& key);
  void set_meta(const std::string& key, const std::string& value);

  std::mutex mu_;
  sqlite3* db_ = nullptr;
  std::string path_, run_id_, url_secret_;
};

}  // namespace trellis::orchestrator
