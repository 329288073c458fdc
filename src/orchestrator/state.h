// The orchestrator's durable state, in one SQLite database (<data_dir>/orchestrator.sqlite, WAL,
// synchronous=FULL, one transaction per change) so that a crash or restart loses no decision:
//   meta         run_id (fixed when the database is created), the URL-signing secret, the newest
//                published policy version, the trainer's public key, the allowlist revision
//   submissions  one row per upload request: (step, node, submission), the declared sha256 and
//                size, status pending -> validating -> accepted | rejected (with the reason;
//                validating is skipped when no validators are configured), what the uploaded
//                file holds (samples, signal samples, completion tokens), request, upload and
//                decision times, the validator that decided and the one holding a lease on it,
//                and the acceptance order
//   nodes        one row per node address: the IP it last registered from, first and last
//                registration times, the timestamp its newest registration was signed at,
//                whether (why, when) it was evicted, and how often validators rejected its files
// A (step, node, submission) has at most one row that is pending, validating or accepted (a
// unique index enforces it); rejected rows stay as history, and a node may ask again for a
// submission that was rejected. Leases live in the database, so they survive a restart.
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
  std::string status;  // pending | validating | accepted | rejected
  std::string reason;  // why it was rejected
  FileCounts counts;   // of an uploaded file that passed the orchestrator's checks
  // Unix seconds: the (newest) upload request, the upload that passed the checks (0 before) and
  // the verdict (0 while pending or validating).
  double created_at = 0, uploaded_at = 0, decided_at = 0;
  std::string validator;     // who decided a validating submission; "" for the orchestrator
  std::string claimed_by;    // the validator that holds (or held) a lease on it; "" = never claimed
  double lease_expires = 0;  // unix seconds; the lease has ended once this is past
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
  int64_t rejections = 0;      // files of this node that validators rejected
  std::string last_rejection;  // "step <s> submission <k>: <the reason>" of the newest one
};

// Why `node` is refused: "node <address> was evicted: <reason>".
std::string eviction_message(const Node& node);

// What an eviction did (State::evict, State::reject_validated).
struct Eviction {
  Node node;                            // the node's row after the call
  std::vector<SubmissionKey> rejected;  // its submissions that were validating, now rejected
};

// What a validator's rejection did (State::reject_validated).
struct Rejection {
  bool rejected = false;  // false: the submission was not validating, and nothing changed
  Eviction eviction;      // the node's row; the other submissions an eviction rejected
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
  // first start). A database of the previous schema (version 1, before validators) is migrated
  // in place. Error naming the path when it cannot be opened or has an unknown schema version.
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
  // already evicted keeps its first reason and time. Every validating submission of the node
  // becomes rejected ("node <address> was evicted: <reason>"), even when it was evicted before:
  // none of its files are used. Bumps the allowlist revision when the allowed IP set changes.
  Eviction evict(const std::string& address, const std::string& reason, double now);
  std::optional<Node> node(const std::string& address);
  // Every node, by address.
  std::vector<Node> nodes();
  NodeCounts node_counts();
  Allowlist allowlist();

  // Records a pending request for `key`, or refreshes the pending one (declared hash, size,
  // time). Returns "pending" then; "validating" or "accepted" (nothing recorded) when `key` is
  // already past that.
  std::string request(const SubmissionKey& key, const std::string& sha256, int64_t size,
                      double now);
  // The newest row for `key`, if any.
  std::optional<Submission> latest(const SubmissionKey& key);
  bool is_accepted(const SubmissionKey& key);
  bool is_validating(const SubmissionKey& key);
  // The pending row of `key`, whose upload passed the orchestrator's checks, becomes accepted
  // (no validators) or validating (false when there is none: decided meanwhile).
  bool accept(const SubmissionKey& key, const FileCounts& counts, double now);
  bool start_validation(const SubmissionKey& key, const FileCounts& counts, double now);
  // The pending row of `key` becomes rejected with `reason` (false when there is none).
  bool reject(const SubmissionKey& key, const std::string& reason, double now);

  // The oldest validating submission (by upload time) that no lease holds (never claimed, or
  // its lease ended by `now`), now leased to `validator` until now + lease_s; nothing when none
  // waits. Two callers never get the same submission while its lease runs.
  std::optional<Submission> claim(const std::string& validator, double lease_s, double now);
  // The validating row of `key` becomes accepted, decided by `validator`, next in acceptance
  // order (false when there is none: decided meanwhile).
  bool accept_validated(const SubmissionKey& key, const std::string& validator, double now);
  // The validating row of `key` becomes rejected with `reason`, decided by `validator`; the
  // node's rejection count goes up and the reason becomes its last rejection (a row is created
  // for a node that never registered), and a non-empty `evict_reason` evicts it as evict() does;
  // all in one transaction.
  Rejection reject_validated(const SubmissionKey& key, const std::string& reason,
                             const std::string& validator, const std::string& evict_reason,
                             double now);
  // Submissions with `status` ("" = any) of `step` (nothing = any), in id order.
  std::vector<Submission> submissions(const std::string& status = "",
                                      std::optional<int64_t> step = std::nullopt);

  // A step's accepted submissions in acceptance order.
  std::vector<Submission> accepted(int64_t step);
  // Accepted signal samples per step (steps without any are absent).
  std::map<int64_t, int64_t> signal_samples_by_step();
  // Submissions per status (pending, validating, accepted, rejected; each present).
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
  bool has_status(const SubmissionKey& key, const char* status);
  void bump_allowlist_if_changed(const std::vector<std::string>& before);  // callers hold mu_
  // evict()'s work inside the caller's transaction (callers hold mu_).
  Eviction evict_locked(const std::string& address, const std::string& reason, double now);
  void migrate_from_v1();  // inside the opening transaction

  std::mutex mu_;
  sqlite3* db_ = nullptr;
  std::string path_, run_id_, url_secret_;
};

}  // namespace trellis::orchestrator
