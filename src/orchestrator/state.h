// The orchestrator's durable state, in one SQLite database (<data_dir>/orchestrator.sqlite, WAL,
// synchronous=FULL, one transaction per change) so that a crash or restart loses no decision:
//   meta         run_id (fixed when the database is created), the URL-signing secret, the newest
//                published policy version, the trainer's public key, the allowlist revision
//   submissions  one row per upload request: (step, node, submission), the declared sha256 and
//                size, status pending -> accepted | rejected (with the reason), what an accepted
//                file holds (samples, signal samples, completion tokens), request and decision
//                times, and the acceptance order
//   nodes        one row per node address: the IP it last registered from, first and last
//                registration times, the timestamp its newest registration was signed at, and
//                whether (why, when) it was evicted
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

// A node of the pool. A node evicted before it ever registered has ip "" and times 0.
struct Node {
  std::string address;  // Ed25519 public key, 64 lowercase hex digits
  std::string ip;       // where its newest registration came from, as the orchestrator saw it
  double registered_at = 0, last_seen = 0;  // unix seconds: first and newest registration
  int64_t signed_at = 0;  // the timestamp its newest accepted registration was signed with
  bool evicted = false;
  std::string evicted_reason;
  double evicted_at = 0;
};

// The IPs relays may serve: those of registered nodes that are not evicted, sorted, without
// duplicates. `revision` increases whenever that set changes.
struct Allowlist {
  int64_t revision = 0;
  std::vector<std::string> ips;
};

struct NodeCounts {
  int64_t registered = 0;  // registered and not evicted
  int64_t evicted = 0;
};

// What became of a registration (State::register_node).
struct Registration {
  enum Outcome {
    kRegistered,  // recorded (or refreshed)
    kEvicted,     // the node is evicted: nothing changed
    kReplayed,    // older than the node's newest registration (or as old, from another IP)
  };
  Outcome outcome = kRegistered;
  Node node;  // the node's row after the call
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
  // Records `version` when newer than the current one, and `public_key` as the trainer's public
  // key when not empty (whatever the version), in one transaction; returns the newest version.
  int64_t publish_version(int64_t version, const std::string& public_key = "");
  // The trainer's public key (64 hex digits), "" until the trainer has published one.
  std::string trainer_public_key();

  // Records that `address` registered from `ip` with a registration signed at `signed_at`
  // (checked by the caller), at time `now`: the IP and last_seen are refreshed (registered_at
  // is kept from the first time). Refused, changing nothing, when the node is evicted, or when
  // `signed_at` is older than its newest registration, or equal to it but from another IP (a
  // replayed request must not move the node's IP). Bumps the allowlist revision when the
  // allowed IP set changes.
  Registration register_node(const std::string& address, const std::string& ip, int64_t signed_at,
                             double now);
  // Marks `address` evicted with `reason` (creating its row when it never registered); a node
  // already evicted keeps its first reason and time. Bumps the allowlist revision when the
  // allowed IP set changes. Returns the node's row.
  Node evict(const std::string& address, const std::string& reason, double now);
  std::optional<Node> node(const std::string& address);
  // Every node, by address.
  std::vector<Node> nodes();
  NodeCounts node_counts();
  Allowlist allowlist();

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
  std::vector<std::string> allowed_ips();                     // callers hold mu_
  std::optional<Node> find_node(const std::string& address);  // callers hold mu_

  std::mutex mu_;
  sqlite3* db_ = nullptr;
  std::string path_, run_id_, url_secret_;
};

}  // namespace trellis::orchestrator
