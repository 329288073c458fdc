// The orchestrator server's internals (api.h is its interface): struct Server::Impl, its state and
// the declarations of its route handlers, which live in one file per route group:
//   api.cpp              ApiOptions, construction and crash recovery, the route table (routes():
//                        every route in one place) and what guards every request (body bounds,
//                        upload URLs, tokens, signatures, refusals as JSON)
//   api_status.cpp       what the server reports: GET /status, /metrics, /ledger/head
//   api_nodes.cpp        the node registry: POST /nodes, /heartbeat, /nodes/<address>/stake,
//                        /approve and /evict; GET /nodes, /allowlist
//   api_tasks.cpp        the roles the pool owner asks nodes to run: POST /tasks, GET /tasks
//   api_submissions.cpp  a worker's file from its work to its download: POST /work, /submissions,
//                        PUT /upload/..., GET /steps/<s>/accepted, /rollouts/..., /submissions
//   api_validation.cpp   trusted validators' verdicts: POST /validation/claim and /verdict,
//                        GET /validation/files/...
//   api_trainer.cpp      the trainer's published policy version and step metrics: POST
//                        /trainer/version, /trainer/metrics
//   api_dashboard.cpp    the operator's dashboard: GET /dashboard (the page) and
//                        /dashboard/api/... (what it shows); the relays' reports (POST /relays)
// Only these files include it.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/request_signing.h"
#include "ledger/entry.h"
#include "orchestrator/api.h"
#include "orchestrator/credentials.h"
#include "orchestrator/invite_sweep.h"
#include "orchestrator/ledger_audit.h"
#include "orchestrator/signed_url.h"
#include "orchestrator/state.h"
#include "rollout/rollout_file.h"
#include "rollout/store.h"

namespace trellis::orchestrator {

// Helpers more than one route group uses (defined in api.cpp).
namespace api_detail {

// A non-negative decimal integer without sign (path segments: steps).
std::optional<int64_t> parse_index(std::string_view text);

// An integer field of a request body: 400 naming the field when absent or not an integer in
// [lo, hi].
int64_t integer_field(const Json& body, const char* key, int64_t lo, int64_t hi,
                      const std::string& where);

std::string string_field(const Json& body, const char* key, const std::string& where);

Json parse_body(const httplib::Request& req, const std::string& where);

// A node address field (an Ed25519 public key): 400 naming the field unless 64 lowercase hex.
std::string address_field(const Json& body, const char* key, const std::string& where);

std::string file_name(const SubmissionKey& key);

std::string describe(const SubmissionKey& key);

// A node as GET /nodes shows it (api_nodes.cpp).
Json node_json(const Node& n, const PoolPolicy& policy);

// A submission as GET /submissions shows it (api_submissions.cpp).
Json submission_json(const Submission& s);

// `/dashboard` or a path under it: the routes that take a Basic password and carry the
// dashboard's headers (api_dashboard.cpp).
bool is_dashboard_path(std::string_view path);

// The password of an `Authorization: Basic ...` header; "" for any other or a malformed one
// (api_dashboard.cpp).
std::string basic_password(const std::string& authorization);

// What every dashboard answer carries, 401s included: a Content-Security-Policy that runs only
// the page's own script (every string it shows comes from strangers), no framing, no caching.
void set_dashboard_headers(httplib::Response& res);

}  // namespace api_detail

struct Server::Impl {
  ApiOptions opt;
  State state;
  UrlSigner signer;
  rollout::RolloutStore store;       // accepted files
  rollout::RolloutStore validating;  // files waiting for a validator's verdict
  rollout::RolloutStore rejected;    // files validators rejected, kept for operators
  httplib::Server svr;
  std::thread thread;
  int port = -1;
  std::string url;

  std::mutex decide_mu;  // one decision (accept, reject, validating, evict) at a time
  std::mutex admit_mu;   // one assignment at a time, so two workers never fill the same gap
  std::atomic<int64_t> uploads_receiving{0};  // bodies being received and checked now
  std::atomic<double> backlog_full_at{0};     // when work was last held back for the backlog bound
  std::mutex metrics_mu;
  std::map<std::string, int64_t> refused;  // by reason code, since start
  NonceWindow nonces;                      // of the node requests signed within the window
  InviteSweep sweep;                       // invites nodes found in discovery (if any)
  LedgerAudit audit;                       // the ledger verified for the dashboard

  // What the dashboard shows that no decision depends on, kept in memory: each node's agent state
  // from its newest heartbeat, and each relay's newest report (POST /relays), at most
  // kMaxRelayReports of them.
  std::mutex reports_mu;
  std::map<std::string, std::string> agent_states;
  std::map<std::string, Json> relay_reports;

  explicit Impl(ApiOptions o);

  // ---- api.cpp: construction, recovery, the route table, guards -------------------------------

  // `o` with its tokens loaded or created where it has none; Error for a short one (privileged
  // requests are never open).
  static ApiOptions with_tokens(ApiOptions o);

  // Puts files back in step with their rows after a crash between a file move and its commit:
  // a validating row whose file already moved into the store (an accept that did not commit)
  // gets it back; a file under validating/ whose row is no longer validating (a reject or an
  // eviction committed before its file moved, an upload that never committed) goes where its
  // row says, or away.
  void recover();

  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  httplib::Server::Handler guarded(Handler fn);

  void count_refusal(const std::string& kind);

  void routes();

  // The role whose token `req`'s route needs, or nothing for a public or node route.
  static std::optional<Role> privileged(const httplib::Request& req);

  // `req` carries `role`'s bearer token (compared in constant time); what relays may read, the
  // operator (the trainer's token) may read too.
  bool authorized(const httplib::Request& req, Role role) const;

  // Checks that `claimed` (the node the request names) signed `req`, whose body hashes to
  // `body_sha256` (common/request_signing.h), and returns the signed timestamp: 401 for an
  // unsigned, forged, stale or replayed request, 403 for a signature by another node.
  int64_t require_signed_by(const httplib::Request& req, const std::string& claimed,
                            const std::string& body_sha256, const std::string& where);

  // "step_<s>" and "<node>-<sub>.parquet" of a path; 400 naming what is malformed.
  std::pair<SubmissionKey, std::string> file_of(const httplib::Request& req);

  // ---- api_status.cpp: reading ----------------------------------------------------------------

  int64_t step_counter_now();

  double tokens_per_s();

  Json status();

  // Work was held back for the backlog bound within the last kBehindWindowS while a step's worth
  // waited for a verdict, and a step's worth still waits.
  bool validators_behind(int64_t validating_samples) const;

  // Samples of every file a worker made (State::samples_by_status: work not yet uploaded holds
  // none), whatever became of it.
  static int64_t generated_samples(const std::map<std::string, int64_t>& by_status);

  int64_t max_backlog_samples() const;

  double judged_per_s();

  std::string metrics();

  // GET /ledger/head: the ledger, its keeper and its newest entry (public: pin it anywhere).
  void ledger_head(const httplib::Request& req, httplib::Response& res);

  // ---- api_nodes.cpp: the node registry -------------------------------------------------------

  // 403 unless `address` is a registered node that is not evicted.
  void require_member(const std::string& address);

  // POST /nodes: a node proves it holds its address's key by signing the request; its IP is the
  // connection's (or a trusted proxy's X-Real-IP), and it joins the allowlist unless evicted.
  void register_node(const httplib::Request& req, httplib::Response& res);

  // The node address in the path of `req` (400 unless it is one).
  static std::string path_address(const httplib::Request& req, const std::string& where);

  // POST /nodes/<address>/stake {"amount": N}: the pool owner deposits N work units to the
  // node's stake, on the ledger (what it paid the owner is between the two of them).
  void deposit_stake(const httplib::Request& req, httplib::Response& res);

  // POST /nodes/<address>/approve: the pool owner admits the node (join = "approval").
  void approve(const httplib::Request& req, httplib::Response& res);

  // GET /nodes/<address>/logs?lines=N: the end of the node's task log, fetched from its agent's
  // endpoint (known from the invite it joined with) with a request signed by the orchestrator's
  // key; at most 1 MiB of the answer is read.
  void node_logs(const httplib::Request& req, httplib::Response& res);

  std::string dead_message(const Node& n) const;

  // POST /heartbeat {node_address, state?}, signed by the node: it is alive. The answer says how
  // often to send the next and which task the node runs (State::task_for).
  void heartbeat(const httplib::Request& req, httplib::Response& res);

  // GET /nodes: every node with its fields, and the nodes holding an unused invite (node IPs:
  // operators only).
  void list_nodes(const httplib::Request& req, httplib::Response& res);

  // POST /nodes/<address>/evict: the node is refused from now on, and its IP leaves the
  // allowlist (unless another active node shares it).
  void evict(const httplib::Request& req, httplib::Response& res);

  void log_eviction(const Eviction& e);

  // Removes the validating files of submissions an eviction rejected. The decision is committed
  // already, so a failure is logged, not answered (the next start removes what is left).
  void drop_files(const std::vector<SubmissionKey>& keys);

  // GET /allowlist: the IPs relays may serve.
  void allowlist(const httplib::Request& req, httplib::Response& res);

  // ---- api_tasks.cpp: tasks -------------------------------------------------------------------

  // A task as GET /tasks and heartbeats show it.
  static Json task_json(const Task& t);

  // GET /tasks: every task.
  void list_tasks(const httplib::Request& req, httplib::Response& res);

  // POST /tasks {role, config, node?}: the pool owner asks for a role to be run (by `node`, or by
  // the next live node that sends a heartbeat without a task). The config must be one Trellis
  // reads: it is checked here, not on the node.
  void create_task(const httplib::Request& req, httplib::Response& res);

  // ---- api_submissions.cpp: work, uploads, accepted files -------------------------------------

  // POST /work: what the node generates next (admission.h), or why it waits. A node has one piece
  // of work at a time: asking again while its lease (orchestrator.work_lease_s from the
  // assignment) runs returns it, so a restarted worker picks it up.
  void work(const httplib::Request& req, httplib::Response& res);

  // POST /submissions: an upload URL for assigned work.
  void submissions(const httplib::Request& req, httplib::Response& res);

  // 409 for a rejected or dropped submission: it is over, and the node asks for new work.
  [[noreturn]] void refuse_closed(const Submission& row);

  // Records `key` as rejected and answers 422 with the reason.
  [[noreturn]] void reject(const SubmissionKey& key, const std::string& kind,
                           const std::string& reason);

  // The checks of an uploaded file that need its contents: every row belongs to this run, node,
  // step and submission; every token was sampled by a policy version the step may use; it holds
  // no more than its assignment's `groups` (0 = any); the worker signed the body. Returns the
  // reject reason code and message, or nothing.
  std::optional<std::pair<std::string, std::string>> check_file(const SubmissionKey& key,
                                                                int64_t groups,
                                                                const rollout::RolloutFile& file,
                                                                const std::string& where);

  // PUT /upload/...: at most max_concurrent_uploads bodies are received and checked at once (each
  // up to max_upload_bytes, then decoded within its budget): beyond that, 503 busy before the
  // body is read, with Retry-After (Client::submit retries). Its URL and Content-Length were
  // checked before this runs.
  void receive_upload(const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader& read);

  // The rest of PUT /upload/... once its body is read: the file's checks, then it waits for a
  // verdict or is accepted.
  void upload(const httplib::Request& req, const std::string& bytes, httplib::Response& res);

  // GET /steps/<s>/accepted: the accepted files of a step, in acceptance order.
  void accepted(const httplib::Request& req, httplib::Response& res);

  // GET /rollouts/step_<s>/<name>: the bytes of an accepted file.
  void download(const httplib::Request& req, httplib::Response& res);

  // GET /submissions?status=&step=: every submission with its status and reason, for operators
  // (why was something rejected?); the trainer's token like GET /nodes.
  void list(const httplib::Request& req, httplib::Response& res);

  // ---- api_validation.cpp: validators ---------------------------------------------------------

  // POST /validation/claim: the oldest upload waiting for a verdict that no other validator
  // holds, leased to this one for validation_lease_s.
  void claim(const httplib::Request& req, httplib::Response& res);

  // GET /validation/files/step_<s>/<name>: what a validator checks.
  void validation_file(const httplib::Request& req, httplib::Response& res);

  // POST /validation/verdict: a validator accepts a validating submission (its file moves into
  // the rollout store and the trainer may use it) or rejects it (its file moves to rejected/,
  // the node is counted and, with evict_on_reject, evicted). The first verdict wins; a lease is
  // not required, validators being trusted.
  void verdict(const httplib::Request& req, httplib::Response& res);

  // Rejects a validating submission that `kMaxClaims` validators claimed and never decided: its
  // file stopped them (a crash, a hang), and a third would fare no better.
  void reject_stalled(const Submission& s);

  // The accepting half of verdict() (callers hold decide_mu; `row` is validating).
  std::string accept_verdict(const Submission& row, const std::string& validator,
                             const std::string& samples_checked,
                             const std::optional<ledger::Statement>& statement = std::nullopt);

  // Drops the open work of steps whose accepted files now hold what they need: surplus, never
  // judged and never held against its node (callers hold decide_mu).
  void close_full_steps();

  // The rejecting half of verdict() (callers hold decide_mu; `row` is validating).
  std::string reject_verdict(const Submission& row, const std::string& validator,
                             const std::string& why, const std::string& samples_checked,
                             const std::optional<ledger::Statement>& statement = std::nullopt);

  // ---- api_trainer.cpp: the trainer -----------------------------------------------------------

  // POST /trainer/version {version, public_key?}: the trainer publishes a policy version.
  void trainer_version(const httplib::Request& req, httplib::Response& res);

  // POST /trainer/metrics {step, metrics: {name: number, ...}}: the metrics of a trained step, for
  // the dashboard (at most kMaxMetrics names of kMaxMetricName bytes).
  void trainer_metrics(const httplib::Request& req, httplib::Response& res);

  // ---- api_dashboard.cpp: the operator's dashboard --------------------------------------------

  // GET /dashboard, /dashboard/app.js, /dashboard/style.css: the page (embedded at build time).
  void serve_dashboard_file(const httplib::Request& req, httplib::Response& res);

  // GET /dashboard/api/summary: the run, training, nodes, validation, relays and the ledger's
  // verification, in one answer the page polls.
  void dashboard_summary(const httplib::Request& req, httplib::Response& res);

  // GET /dashboard/api/submissions?status=&limit=&before_id=: a page of submissions, newest first.
  void dashboard_submissions(const httplib::Request& req, httplib::Response& res);

  // GET /dashboard/api/submissions/<id>: one submission, its reason split into the checks that
  // decided it, and its ledger entries.
  void dashboard_submission(const httplib::Request& req, httplib::Response& res);

  // GET /dashboard/api/ledger?before_seq=&limit=: a page of ledger entries, newest first, and the
  // chain's verification.
  void dashboard_ledger(const httplib::Request& req, httplib::Response& res);

  // POST /relays {name, url, versions, versions_pulled?, shards_pulled?, pull_failures?}: a relay
  // says what it holds (relay token).
  void relay_report(const httplib::Request& req, httplib::Response& res);
};

}  // namespace trellis::orchestrator
