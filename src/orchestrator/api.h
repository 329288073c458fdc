// The orchestrator's HTTP API (the client side is client.h): the step counter, upload URLs,
// uploads and their checks, the queue of uploads waiting for trusted validators' verdicts, the
// accepted files of each step, the trainer's published policy version and public key, and the
// node registry with its evictions and the relays' IP allowlist. State lives in
// <data_dir>/orchestrator.sqlite (state.h), accepted files in <data_dir>/rollouts/, files
// waiting for a verdict in <data_dir>/validating/ and rejected ones in <data_dir>/rejected/
// (rollout/store.h), so a restarted server carries on where it stopped.
//
//   GET  /healthz                       200 "ok"
//   GET  /metrics                       Prometheus text
//   GET  /status                        run id, step counter, policy version, trainer public key,
//                                       run shape, counts
// Node requests (POST /nodes, /work, /submissions, PUT /upload) are signed by the node's key
// (common/request_signing.h): the signer must be the node the request names, and /work,
// /submissions and uploads need a registered node. Privileged requests carry the trainer's or the
// validators' bearer token (credentials.h), checked before the body is read; every body is bounded
// before it is read (common/http_limits.h).
//
//   POST /work                          {node_address, policy_version, groups} -> {work: {step,
//                                       submission, groups, expires} or null, reason}: what the
//                                       node generates next (admission.h); 403 evicted node
//   POST /submissions                   {node_address, step, submission, sha256, size} ->
//                                       {upload_url, expires} for assigned work; 400 malformed,
//                                       403 evicted node, 409 refused (not assigned, dropped,
//                                       accepted, being validated, ...)
//   PUT  /upload/step_<s>/<node>-<sub>.parquet?expires=&sig=
//                                       the file: 202 {status: "validating", samples,
//                                       signal_samples} (200 "accepted" without validation);
//                                       403 bad or expired URL or evicted node, 409 nothing
//                                       pending, 422 rejected
//   GET  /steps/<s>/accepted            {step, files: [...] in acceptance order, signal_samples}
//   GET  /rollouts/step_<s>/<name>      the bytes of an accepted file; 404 otherwise
//   GET  /submissions?status=&step=     {submissions: [...]} in id order (trainer token)
//   POST /validation/claim              {validator} -> {submission: the oldest unleased
//                                       validating one, now leased, or null, policy_version,
//                                       async_level} (validator token); a file two validators
//                                       held without a verdict is rejected instead
//   GET  /validation/files/step_<s>/<name>
//                                       the bytes of a validating file; 404 otherwise
//                                       (validator token)
//   POST /validation/verdict            {step, node_address, submission, accept, reason,
//                                       validator, checked_samples?} -> {status}; 409 not
//                                       validating (validator token)
//   POST /trainer/version               {version, public_key?} (trainer token)
//   POST /nodes                         {address, invite?} signed by it: the node registers
//                                       from its IP (with an invite's nonce when it was invited)
//                                       -> {address, ip}; 400 malformed, 401 bad signature,
//                                       stale or replayed, 403 evicted, not admitted, bad invite,
//                                       or dead without a new invite
//   POST /heartbeat                     {node_address, state?} signed by it -> {state,
//                                       interval_s, task}; 403 not registered, dead or evicted
//   GET  /nodes                         {nodes: [...], invited: [...]} every node with its fields,
//                                       and those holding an unused invite (trainer token)
//   POST /nodes/<address>/evict         {reason?} (trainer token): the node is cut off -> the
//                                       node's fields
//   GET  /allowlist                     {revision, ips}: what relays may serve (relay token)
//   POST /relays                        {name, url, versions, ...}: what a relay holds, for the
//                                       dashboard (relay token)
//   POST /trainer/metrics               {step, metrics}: a trained step's metrics, for the
//                                       dashboard (trainer token)
//   GET  /dashboard, /dashboard/api/... the operator's dashboard (trainer token, also as a Basic
//                                       password): docs/dashboard.md
//
// Every error is JSON {"error": "..."} naming what was wrong; no request can crash the server.
// docs/orchestrator.md describes each endpoint's checks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "orchestrator/invite_sweep.h"
#include "orchestrator/pool_policy.h"

namespace trellis::orchestrator {

struct ApiOptions {
  std::string host = "127.0.0.1";
  int port = 8400;                 // 0 = any free port
  std::string url;                 // what orchestrator.url says; "" = http://<host>:<port>
  std::filesystem::path data_dir;  // orchestrator.sqlite, orchestrator.url, rollouts/, ...
  std::string run_id;              // recorded on the first start; later starts keep the stored one
  int64_t steps = 50, batch_size = 64, group_size = 8, async_level = 2;  // [rl]
  int64_t url_ttl_s = 600;
  int64_t max_upload_bytes = int64_t{256} << 20;
  int64_t max_request_bytes = 64 << 10;  // of every body but an upload's
  // The privileged tokens, at least kMinTokenChars each; "" = server_token(secrets_dir) (created
  // on the first start, credentials.h).
  std::string trainer_token, validator_token, relay_token;
  std::filesystem::path secrets_dir;  // "" = <data_dir>/secrets
  // The orchestrator's Ed25519 key, with which it keeps the ledger (created on the first start);
  // "" = <data_dir>/keys/orchestrator.key.
  std::filesystem::path key_file;
  int64_t signature_window_s = 60;  // a signed request's timestamp may be this far from now
  // Signed requests remembered within that window (their nonces; NonceWindow): in all, and from
  // one client address (an IPv6 /64), which is what bounds a flood from one machine.
  size_t signed_requests_in_window = 200'000, signed_requests_per_address = 4'096;
  // Who may join, and whether uploads that pass the orchestrator's checks wait for a validator's
  // verdict (false = accepted at once) and a node whose file a validator rejects is evicted.
  PoolPolicy pool;
  int64_t validation_lease_s = 120;  // a claim not decided by then goes back to the queue
  int64_t work_lease_s = 600;        // an assignment holds its step's quota this long
  double max_backlog_steps = 2;      // samples awaiting a verdict or in flight, in steps' worth
  int http_threads = 16;
  // Uploads received and checked at once (each up to max_upload_bytes, then decoded); more get
  // 503 busy before their body is read, and the client retries.
  int64_t max_concurrent_uploads = 4;
  // Reverse proxies (nginx in front: nginx_front.h) whose X-Real-IP header names the client;
  // every other peer's address is its connection's.
  std::vector<std::string> trusted_proxies;
  // Where to find nodes to invite, and what they must have (invite_sweep.h); no discovery_url =
  // no invites.
  SweepOptions sweep;
};

// [orchestrator] and [rl] of `config`; data_dir "" means `run_dir`, and the run ID is the run
// directory's name and 64 random bits (a file made for one run never passes in another of the same
// name). Error naming the key for a value out of range.
ApiOptions api_options(const Config& config, const std::filesystem::path& run_dir);

class Server {
 public:
  // Loads or creates the tokens and opens the state database (Error naming what failed).
  explicit Server(ApiOptions options);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port, serves on threads of its own, then writes the URL to
  // <data_dir>/orchestrator.url atomically; returns the port. Error naming the address when it
  // cannot bind.
  int start();
  // Stops accepting requests, finishes those in flight and removes orchestrator.url. Idempotent.
  void stop();
  int port() const;
  std::string url() const;  // as written to orchestrator.url
  const std::string& run_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trellis::orchestrator
