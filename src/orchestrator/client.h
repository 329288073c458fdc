// The orchestrator's HTTP API as the trainer, workers and validators call it (the server is
// api.h). Every
// method throws Error naming the URL and the server's message when the request fails or is
// refused; callers that must survive an orchestrator restart catch it and retry.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/identity.h"
#include "ledger/entry.h"
#include "orchestrator/state.h"  // Node, Allowlist, Submission, SubmissionKey

namespace trellis::orchestrator {

// GET /status
struct Status {
  std::string run_id;
  int64_t step = 0;            // the step counter: smallest step still lacking batch_size samples
  int64_t policy_version = 0;  // newest version the trainer has published
  std::string trainer_public_key;  // hex Ed25519 key that signs checkpoint manifests; "" = unknown
  int64_t steps = 0;               // rl.steps: the run is done when the trainer has published it
  int64_t async_level = 0, batch_size = 0, group_size = 0;
  // Submissions by status.
  int64_t assigned = 0, pending = 0, validating = 0, accepted = 0, rejected = 0, dropped = 0;
  // Samples by what became of them: generated (in every file a worker made, whatever became of
  // it), waiting for a verdict (the validation backlog), accepted, rejected, and dropped unjudged
  // (surplus of a step that filled first).
  int64_t generated_samples = 0, validating_samples = 0, accepted_samples = 0, rejected_samples = 0,
          dropped_samples = 0;
  int64_t max_backlog_samples = 0;  // no new work while the backlog and work in flight reach this
  // Work was held back for that bound in the last 10 s, and a step's worth waits for a verdict.
  bool validators_behind = false;
  double judged_samples_per_s = 0;  // samples validators decided on per second, last 60 s
  double rollout_tokens_per_s = 0;  // completion tokens accepted per second, last 60 s
  bool done = false;                // policy_version >= steps
};

// Work the orchestrator handed to a node (POST /work): generate up to `groups` prompt groups for
// `step` as submission number `submission`, before `expires` (unix seconds) while it holds the
// step's quota.
struct Assignment {
  int64_t step = 0, submission = 0, groups = 0;
  double expires = 0;
};

// What POST /work answered: the node's work, or why it waits.
struct WorkAnswer {
  std::optional<Assignment> work;
  std::string wait_reason;
};

// One accepted file of a step, in acceptance order.
struct AcceptedFile {
  std::string name;  // <node>-<submission>.parquet
  std::string node_address;
  int64_t submission = 0;
  std::string sha256;
  int64_t size = 0;            // bytes
  int64_t samples = 0;         // rows
  int64_t signal_samples = 0;  // rows in groups whose rewards are not all equal
};

// A submission leased to a validator (POST /validation/claim).
struct ValidationClaim {
  SubmissionKey key;
  std::string sha256;
  int64_t size = 0, samples = 0, signal_samples = 0;
  double uploaded_at = 0, lease_expires = 0;  // unix seconds; decide before the lease ends
  std::string file;                           // path of GET /validation/files/...
};

// What POST /validation/claim answered.
struct ClaimResult {
  std::optional<ValidationClaim> claim;  // nullopt: nothing waits
  int64_t policy_version = 0, async_level = 0;
};

// The URL clients use: orchestrator.url, else http://<orchestrator.host>:<orchestrator.port>.
std::string client_url(const Config& config);

class Client {
 public:
  // base_url like "http://127.0.0.1:8400"; `token` is sent as a bearer token on every request
  // (the trainer's token for trainer calls, the validators' for validation calls).
  explicit Client(std::string base_url, std::string token = "", double timeout_s = 30);
  ~Client();

  Status status();
  // Node requests are signed by the node's key (common/request_signing.h) for this run (the
  // run ID comes from the first GET /status).

  // POST /work: what `node`, holding policy version `held_version` (-1: none), generates next, in
  // files of at most `max_groups` groups; its open work when it has some.
  WorkAnswer request_work(const Identity& node, int64_t held_version, int64_t max_groups);
  // POST /submissions (node, step, submission, sha256, size) for a signed upload URL, then PUT
  // the bytes there. Returns the upload's status: "validating" (it waits for a validator's
  // verdict), "accepted" (the orchestrator runs without validators) or "dropped" (the step filled
  // before the file came: it is not needed, and not held against the node); Error with the
  // server's reason when the upload is refused or rejected.
  std::string submit(const Identity& node, int64_t step, int64_t submission,
                     std::string_view file_bytes);
  // GET /steps/<step>/accepted
  std::vector<AcceptedFile> accepted(int64_t step);
  // GET /rollouts/step_<step>/<name>: the bytes of an accepted file; an answer larger than the
  // file's size is refused.
  std::string download(int64_t step, const AcceptedFile& file);
  // POST /trainer/version: the trainer has published policy version `version`; a non-empty
  // `public_key` (64 hex digits) is recorded as the key that signs its checkpoint manifests.
  void publish_version(int64_t version, const std::string& public_key = "");
  // POST /trainer/metrics: the metrics of trained `step` (names to numbers), for the dashboard.
  void report_metrics(int64_t step, const Json& metrics);

  // POST /nodes: registers `node` from this machine's IP, so that relays serve it and it may ask
  // for work; `invite` is the nonce of the invite it accepted, if any. Error when refused (e.g.
  // the node was evicted).
  void register_node(const Identity& node, const std::string& invite = "");
  // POST /heartbeat signed by `node`: it is alive (its agent's `state`, e.g. "running"). Returns
  // the interval until the next and the task the node runs, if any; or, when the orchestrator
  // refuses the node (403: not registered, dead, evicted), the refusal's code and message. Error
  // when it cannot be reached or answers anything else.
  struct Beat {
    double interval_s = 0;
    std::optional<Task> task{};
    std::string refused, why;  // "" unless refused
  };
  Beat heartbeat(const Identity& node, const std::string& state = "");
  // POST /tasks (the trainer token: the pool owner's): a role for `node` ("" = the next live node
  // without one) to run with `config` (TOML); the task's id.
  int64_t create_task(const std::string& role, const std::string& config,
                      const std::string& node = "");
  // GET /nodes/<address>/logs (the trainer token): the end (`lines` lines) of the node's task
  // log, which the orchestrator fetches from the node's agent.
  std::string node_logs(const std::string& address, int64_t lines = 100);
  // GET /tasks (the trainer token): every task, by id.
  std::vector<Task> tasks();
  // POST /nodes/<address>/evict (needs the trainer token): `address` is refused from now on.
  void evict(const std::string& address, const std::string& reason);
  // POST /nodes/<address>/stake (the trainer token: the pool owner's): deposits `amount` work
  // units to the node's stake; returns its stake now.
  int64_t deposit_stake(const std::string& address, int64_t amount);
  // POST /nodes/<address>/approve (likewise): admits the node where join = "approval".
  void approve(const std::string& address);
  // GET /allowlist: the IPs relays may serve, and the revision that changes with them.
  Allowlist allowlist();
  // GET /nodes (needs the trainer token when the orchestrator has one)
  std::vector<Node> nodes();
  // GET /submissions: those with `status` ("" = any) of `step` (nothing = any), in id order,
  // with the reason of each rejection (needs the trainer token like nodes()).
  std::vector<Submission> submissions(const std::string& status = "",
                                      std::optional<int64_t> step = {});

  // POST /validation/claim: leases the oldest submission waiting for a verdict to
  // `validator_name` (needs the validators' token when the orchestrator has one).
  ClaimResult claim_validation(const std::string& validator_name);
  // GET /validation/files/...: the bytes of a claimed submission's file; an answer larger than
  // the claim's size is refused.
  std::string download_for_validation(const ValidationClaim& claim);
  // POST /validation/verdict; returns "accepted" or "rejected" (the server's decision: an
  // accepted file of a node evicted meanwhile is rejected). `reason` is required to reject;
  // `checked_samples` < 0 leaves it out. `signed_verdict`, when given, is the validator's own
  // statement of this verdict for the ledger (ledger::make_statement of ledger::verdict_body with
  // the same fields and the claim's sha256; the run ID is the ledger's). Error when the
  // submission is not being validated or the statement does not verify.
  std::string post_verdict(const SubmissionKey& key, bool accept, const std::string& reason,
                           const std::string& validator_name, int64_t checked_samples,
                           const std::optional<ledger::Statement>& signed_verdict = std::nullopt);

  const std::string& base_url() const { return base_url_; }

 private:
  const std::string& run_id();  // from the first GET /status: signed requests name it

  std::string base_url_, token_, run_id_;
  double timeout_s_;
};

}  // namespace trellis::orchestrator
