// The orchestrator's durable state, in one SQLite database (<data_dir>/orchestrator.sqlite, WAL,
// synchronous=FULL, one transaction per change) so that a crash or restart loses no decision:
//   meta         run_id (fixed when the database is created), the URL-signing secret, the newest
//                published policy version, the trainer's public key, the allowlist revision
//   submissions  one row per piece of work handed out: (step, node, submission), the groups the
//                file may hold and until when the assignment holds its step's quota, the declared
//                sha256 and size, status assigned -> pending -> validating -> accepted | rejected
//                (with the reason; validating is skipped when no validators are configured), or
//                dropped (surplus: its step filled first; never judged, never charged to the
//                node), what the file holds (samples, signal samples, completion tokens), request,
//                upload and decision times, the validator that decided and the one holding a lease
//                on it, and the acceptance order
//   nodes        one row per node address: the IP it last registered from, first and last
//                registration times, the timestamp its newest registration was signed at,
//                whether (why, when) it was evicted, and how often validators rejected its files
//   step_metrics each trained step's metrics, as the trainer reported them (the dashboard's plots)
//   node_metadata each invited node's discovery metadata: hardware, software version
//   tasks        roles for node agents to run (id, role, config, the node that has it)
//   ledger       the run's ledger (ledger/ledger.h), kept by the orchestrator's key: every
//                registration (new, or from a new IP), file that passed the orchestrator's checks
//                (with its work units: completion tokens), verdict and eviction is appended in
//                the transaction that makes the change, so the two never disagree
// A (step, node, submission) has at most one row that is assigned, pending, validating or accepted
// (a unique index enforces it); rejected and dropped rows stay as history. Submission numbers are
// the orchestrator's: the next one of (step, node) follows every number it handed out before.
// Leases live in the database, so they survive a restart.
//
// Thread-safe: one connection behind a mutex.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/identity.h"
#include "common/json.h"
#include "common/sqlite.h"
#include "ledger/ledger.h"
#include "orchestrator/admission.h"
#include "orchestrator/pool_policy.h"
#include "orchestrator/step_counter.h"

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
  std::string status;  // assigned | pending | validating | accepted | rejected | dropped
  std::string reason;  // why it was rejected or dropped
  // Of an uploaded file that passed the orchestrator's checks. Before the upload, `samples` is
  // what the assignment allows once the file exists (an upload URL was asked for), else 0.
  FileCounts counts;
  int64_t groups = 0;       // prompt groups the file may hold; 0 = any (rows of schema v2)
  double work_expires = 0;  // unix seconds: until then an open assignment holds its step's quota
  // Unix seconds: the assignment or the (newest) upload request, the upload that passed the
  // checks (0 before) and the decision (0 while open).
  double created_at = 0, uploaded_at = 0, decided_at = 0;
  std::string validator;     // who decided a validating submission; "" for the orchestrator
  std::string claimed_by;    // the validator that holds (or held) a lease on it; "" = never claimed
  double lease_expires = 0;  // unix seconds; the lease has ended once this is past
};

// A node of the pool. A node evicted before it ever registered has ip "" and times 0.
struct Node {
  std::string address;  // Ed25519 public key, 64 lowercase hex digits
  std::string ip{};     // where its newest registration came from, as the orchestrator saw it
  double registered_at = 0, last_seen = 0;  // unix seconds: first and newest registration
  int64_t signed_at = 0;  // the timestamp its newest accepted registration was signed with
  bool evicted = false;
  std::string evicted_reason{};
  double evicted_at = 0;
  int64_t rejections = 0;        // files of this node that validators rejected
  std::string last_rejection{};  // "step <s> submission <k>: <the reason>" of the newest one
  // Unix seconds of its newest heartbeat (or registration after one); 0 = it never sent one (a
  // worker started without a node agent), and then its registrations are its signs of life.
  double heartbeat_at = 0;
};

// A node's state at `now` under `policy`'s liveness rules (specs/protocol.md §4): "evicted";
// "dead" (no heartbeat for dead_after intervals), "unhealthy" (unhealthy_after), "healthy"; for a
// node that never sent a heartbeat, "registered", or "stale" once its newest registration is older
// than registration_ttl_s.
std::string node_state(const Node& node, double now, const PoolPolicy& policy);
// Neither evicted, dead nor stale: on the allowlist, counted on its IP, served.
bool node_is_live(const Node& node, double now, const PoolPolicy& policy);

// A task (specs/protocol.md §4): a role for a node agent to run with a config, created by the
// pool owner through the API and pulled by a node with its heartbeat.
struct Task {
  int64_t id = 0;
  std::string role;    // worker | validator | relay
  std::string config;  // TOML layered over the defaults when the agent starts the role
  std::string node;    // the node running it; "" while no node has it
  double created_at = 0, assigned_at = 0;
};

// The roles a task may name.
const std::vector<std::string>& task_roles();

// Every submission status, in lifecycle order (the database's CHECK constraint lists the same).
const std::vector<std::string>& submission_statuses();

// Why `node` is refused: "node <address> was evicted: <reason>".
std::string eviction_message(const Node& node);

// What an eviction did (State::evict, State::reject_validated).
struct Eviction {
  Node node;                            // the node's row after the call
  std::vector<SubmissionKey> rejected;  // its submissions that were validating (had a file)
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
    kRegistered,      // recorded (or refreshed)
    kEvicted,         // the node is evicted: nothing changed
    kReplayed,        // older than the node's newest registration (or as old, from another IP)
    kNotAdmitted,     // the pool's policy does not admit it (no stake, not approved): see `why`
    kBadInvite,       // the invite it names is unknown, used, expired or another node's: `why`
    kInviteRequired,  // it sent heartbeats and is dead: it returns only with a new invite
    kIpFull,          // its IP holds policy.max_nodes_per_ip live nodes already: `why`
  };
  Outcome outcome = kRegistered;
  Node node;          // the node's row after the call
  std::string why{};  // kNotAdmitted: what the node lacks and how to get it
};

// What one validator decided (State::validator_activity).
struct ValidatorActivity {
  std::string name;
  int64_t accepted = 0, rejected = 0;       // files
  int64_t samples = 0, recent_samples = 0;  // of the files it decided; recent: since `since`
  double last_decided_at = 0;
  int64_t holding = 0;  // validating files it holds a lease on now
};

// A trained step's metrics as the trainer reported them (State::step_metrics).
struct StepMetrics {
  int64_t step = 0;
  double reported_at = 0;
  std::string metrics;  // a JSON object's text
};

class State {
 public:
  // Opens (creating if needed) the database at `path`. A new database records `run_id` and a
  // fresh random URL-signing secret; an existing one keeps its own (the run ID is fixed at the
  // first start). A database of the previous schema (version 1, before validators) is migrated
  // in place. Error naming the path when it cannot be opened or has an unknown schema version.
  // The ledger is kept with `keeper` (the orchestrator's key); `policy` decides who may register
  // and what a rejection costs, and a new ledger's pool entry names it. Error when the
  // database's ledger is another key's.
  State(const std::filesystem::path& path, const std::string& run_id, Identity keeper,
        PoolPolicy policy = {});
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  const std::string& run_id() const { return run_id_; }
  const std::string& url_secret() const { return url_secret_; }
  const ledger::Ledger& ledger() const { return *ledger_; }

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
  // A node the pool's policy does not admit is refused too (kNotAdmitted), changing nothing, and
  // so is one whose IP (an IPv6 address: its /64) holds max_nodes_per_ip other live nodes
  // (kIpFull).
  // A registration naming an `invite` (its nonce) uses it up and starts the node's heartbeat
  // clock (an `invite` entry on the ledger); one without cannot bring back a node that sent
  // heartbeats and died (kInviteRequired), and leaves a live one's clock as it was.
  Registration register_node(const std::string& address, const std::string& ip, int64_t signed_at,
                             double now, const std::string& invite = "");
  // Records an invite sent to `address` (valid until `expires`) at its agent's `endpoint`, so
  // that its registration can use it once.
  void record_invite(const std::string& address, const std::string& nonce, double expires,
                     double now, const std::string& endpoint = "");
  // Records `address`'s discovery metadata (a JSON object's text, parsed and bounded by the
  // caller), replacing what was recorded before.
  void record_node_metadata(const std::string& address, const std::string& metadata, double now);
  // Records the metrics of trained `step` (a JSON object's text, checked by the caller), replacing
  // an earlier report of the same step (a resumed trainer trains it again).
  void record_step_metrics(int64_t step, const std::string& metrics, double now);
  // The agent endpoint `address` joined through (its newest used invite's); "" when it never
  // joined by invite.
  std::string node_endpoint(const std::string& address);
  // Whether the invite sweep should invite `address` at `now`: not evicted, not a live member,
  // and holding no unused invite that is still valid.
  bool wants_invite(const std::string& address, double now);
  // Deletes the unused invites that expired before `now`: a stranger that never answers gets a
  // new invite per lifetime, and the table stays bounded by the nodes in discovery and the joins
  // (a used invite is kept: the endpoint its node joined through).
  void forget_expired_invites(double now);
  // The addresses holding an unused invite valid at `now` (state "invited").
  std::vector<std::string> invited(double now);
  // Why the pool's policy does not admit `address` now ("" when it does): under "stake", its stake
  // (deposits less slashes, on the ledger) is below the pool's; under "approval", the owner has
  // not approved it.
  std::string admission_problem(const std::string& address);
  // Records the owner's deposit of `amount` (> 0) work units to `address`'s stake on the ledger;
  // returns its stake now.
  int64_t deposit_stake(const std::string& address, int64_t amount);
  // Records the owner's approval of `address` on the ledger (once); returns false when it was
  // approved already.
  bool approve(const std::string& address);
  int64_t stake_of(const std::string& address);
  // The ledger's newest entry: its number and hash.
  std::pair<int64_t, std::string> ledger_head();
  const PoolPolicy& policy() const { return policy_; }
  // Marks `address` evicted with `reason` (creating its row when it never registered); a node
  // already evicted keeps its first reason and time. Every validating submission and open
  // assignment of the node becomes rejected ("node <address> was evicted: <reason>"), even when
  // it was evicted before: none of its files are used. Bumps the allowlist revision when the
  // allowed IP set changes.
  Eviction evict(const std::string& address, const std::string& reason, double now);
  std::optional<Node> node(const std::string& address);
  // Every node, by address.
  std::vector<Node> nodes();
  NodeCounts node_counts();
  // The allowlist at `now`: a node dead by then is off it (its revision moves when that changes
  // the set).
  Allowlist allowlist(double now);
  // What a heartbeat of `address` at `now` found: recorded, or refused because the node is not
  // registered, evicted, or dead (it must register again).
  enum class Beat { kRecorded, kNotRegistered, kEvicted, kDead };
  Beat heartbeat(const std::string& address, double now);

  // A new task for `role` with `config`, for `node` ("" = the next node that asks); its id.
  int64_t create_task(const std::string& role, const std::string& config, const std::string& node,
                      double now);
  // The task `address` runs: the one it has, else (if it is alive) the oldest task no live node
  // has (never taken, or held by a node that died since), now its. Nothing when none is left.
  std::optional<Task> task_for(const std::string& address, double now);
  std::vector<Task> tasks();

  // The node's newest open assignment (assigned, or pending: an upload URL was asked for) whose
  // lease runs past `now`, if any.
  std::optional<Submission> open_assignment(const std::string& node_address, double now);
  // Hands (step, node, the next submission number of that pair) out: an assigned row for up to
  // `groups` groups, holding its step's quota until `expires`. Returns the row.
  Submission assign(int64_t step, const std::string& node_address, int64_t groups, double expires,
                    double now);
  // What admission control decides on (admission.h): the step counter for `batch_size`, the
  // newest policy version, and the quota of every step from the counter on, at time `now`.
  AdmissionSnapshot admission_snapshot(int64_t steps, int64_t batch_size, double now);

  // The assigned (or pending) row for `key` becomes pending with the declared hash and size, its
  // samples what the assignment allows (groups x `group_size`: the file exists now); its lease is
  // left as it was (no request extends one). Returns "pending" then; otherwise nothing changes and
  // it returns why: "validating" or "accepted" (past that), "rejected", "dropped" (its step filled
  // first; the row's samples are counted as generated, since the file was) or "" (never assigned).
  std::string request(const SubmissionKey& key, const std::string& sha256, int64_t size,
                      int64_t group_size, double now);
  // The newest row for `key`, if any.
  std::optional<Submission> latest(const SubmissionKey& key);
  bool is_accepted(const SubmissionKey& key);
  bool is_validating(const SubmissionKey& key);
  // The pending row of `key`, whose upload passed the orchestrator's checks, becomes accepted
  // (no validators) or validating; false when there is none (decided meanwhile) or its declared
  // hash is no longer `sha256` (the file's: re-checked at commit).
  bool accept(const SubmissionKey& key, const std::string& sha256, const FileCounts& counts,
              double now);
  bool start_validation(const SubmissionKey& key, const std::string& sha256,
                        const FileCounts& counts, double now);
  // The pending row of `key` becomes rejected with `reason` (false when there is none).
  bool reject(const SubmissionKey& key, const std::string& reason, double now);

  // The validating submission of the lowest step (the one the trainer needs next), oldest upload
  // first, that no lease holds (never claimed, or its lease ended by `now`), now leased to
  // `validator` until now + lease_s; nothing when none waits. Two callers never get the same
  // submission while its lease runs. Its claimed_by lists every validator that claimed it, in
  // order ("a, b"): leases that ran out without a verdict stay on the record.
  std::optional<Submission> claim(const std::string& validator, double lease_s, double now);
  // The validating row of `key` becomes accepted, decided by `validator`, next in acceptance
  // order (false when there is none: decided meanwhile).
  // `signed_verdict`, when given, is the validator's own statement of this verdict for the ledger
  // (ledger::verdict_body of the row, in its words, signed by its key; the validator token
  // vouches for the key, which the ledger is told is a validator's on its first verdict);
  // otherwise the orchestrator states it (the reason being `reason`). Error, changing nothing,
  // when the statement is not this verdict on this file or its signature fails.
  bool accept_validated(const SubmissionKey& key, const std::string& validator, double now,
                        const std::optional<ledger::Statement>& signed_verdict = std::nullopt);
  // The validating row of `key` becomes rejected with `reason`, decided by `validator`; the
  // node's rejection count goes up and the reason becomes its last rejection (a row is created
  // for a node that never registered), and a non-empty `evict_reason` evicts it as evict() does;
  // all in one transaction; and the node's stake is slashed by the pool's amount (on the ledger,
  // before the eviction). `signed_verdict` as for accept_validated.
  Rejection reject_validated(const SubmissionKey& key, const std::string& reason,
                             const std::string& validator, const std::string& evict_reason,
                             double now,
                             const std::optional<ledger::Statement>& signed_verdict = std::nullopt);
  // Steps whose accepted files hold `batch_size` signal samples are closed: their assigned,
  // pending and validating rows become dropped ("step <s> closed: ..."). Returns those rows as
  // they were before (a validating one has a file to remove).
  std::vector<Submission> close_full_steps(int64_t batch_size, double now);

  // Submissions with `status` ("" = any) of `step` (nothing = any), in id order.
  std::vector<Submission> submissions(const std::string& status = "",
                                      std::optional<int64_t> step = std::nullopt);

  // Up to `limit` submissions with `status` ("" = any) whose id is below `before_id`, newest first
  // (the dashboard's pages).
  std::vector<Submission> submissions_page(const std::string& status, int64_t before_id,
                                           int64_t limit);
  std::optional<Submission> submission(int64_t id);
  // Every validator that decided a file or holds a lease at `now`, by name; recent_samples counts
  // the samples it decided at or after `since`.
  std::vector<ValidatorActivity> validator_activity(double since, double now);
  // The reported metrics of the newest `limit` steps, in step order.
  std::vector<StepMetrics> step_metrics(int64_t limit);
  // Every recorded node's discovery metadata (a JSON object's text), by address.
  std::map<std::string, std::string> node_metadata();

  // A step's accepted submissions in acceptance order.
  std::vector<Submission> accepted(int64_t step);
  // Accepted signal samples per step (steps without any are absent).
  std::map<int64_t, int64_t> signal_samples_by_step();
  // Submissions per status (assigned, pending, validating, accepted, rejected, dropped; each
  // present).
  std::map<std::string, int64_t> count_by_status();
  // Samples per status, as count_by_status() (assigned rows hold none; a pending row holds what
  // its file is expected to hold).
  std::map<std::string, int64_t> samples_by_status();
  // Samples validators decided on (accepted or rejected) at or after `since` (unix seconds).
  int64_t samples_judged_since(double since);
  // Totals over accepted submissions.
  FileCounts accepted_totals();
  // Completion tokens of submissions accepted at or after `since` (unix seconds).
  int64_t completion_tokens_since(double since);

 private:
  void exec(const char* sql);
  std::string meta(const std::string& key);
  void set_meta(const std::string& key, const std::string& value);
  // A node whose last heartbeat is older than this at `now` is Dead (node_state()'s rule).
  double dead_before(double now) const;
  // Binds kLiveNodes' two parameters for `now` (a heartbeat's and a registration's deadline).
  sqlite::Statement& bind_live(sqlite::Statement& q, double now) const;
  std::vector<std::string> allowed_ips(double now);           // callers hold mu_
  std::optional<Node> find_node(const std::string& address);  // callers hold mu_
  bool has_status(const SubmissionKey& key, const char* status);
  // Moves the allowlist revision when the allowed IPs at `now` differ from those it last had.
  void bump_allowlist_if_changed(double now);  // callers hold mu_ and a transaction
  // evict()'s work inside the caller's transaction (callers hold mu_).
  Eviction evict_locked(const std::string& address, const std::string& reason, double now);
  void migrate(const std::string& from_version);  // inside the opening transaction
  std::string use_invite_locked(const std::string& address, const std::string& nonce, double now);
  std::string admission_problem_locked(const std::string& address);  // callers hold mu_
  // Why `address` may not register from `ip` (policy_.max_nodes_per_ip), or "" (callers hold mu_).
  std::string ip_problem_locked(const std::string& address, const std::string& ip, double now);
  // Appends the verdict on `row` to the ledger: `signed_verdict` when given (checked against
  // the row), else the orchestrator's own (callers hold mu_ and a transaction).
  void record_verdict(const Submission& row, bool accepted, const std::string& reason,
                      const std::optional<ledger::Statement>& signed_verdict);

  std::mutex mu_;
  sqlite::Database db_;
  std::string path_, run_id_, url_secret_;
  std::unique_ptr<ledger::Ledger> ledger_;
  PoolPolicy policy_;
};

}  // namespace trellis::orchestrator
