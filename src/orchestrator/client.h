// The orchestrator's HTTP API as the trainer and workers call it (the server is api.h). Every
// method throws Error naming the URL and the server's message when the request fails or is
// refused; callers that must survive an orchestrator restart catch it and retry.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/identity.h"
#include "orchestrator/state.h"  // Node, Allowlist

namespace trellis::orchestrator {

// GET /status
struct Status {
  std::string run_id;
  int64_t step = 0;            // the step counter: smallest step still lacking batch_size samples
  int64_t policy_version = 0;  // newest version the trainer has published
  std::string trainer_public_key;  // hex Ed25519 key that signs checkpoint manifests; "" = unknown
  int64_t steps = 0;               // rl.steps: the run is done when the trainer has published it
  int64_t async_level = 0, batch_size = 0, group_size = 0;
  int64_t pending = 0, accepted = 0, rejected = 0;  // submissions by status
  double rollout_tokens_per_s = 0;  // completion tokens accepted per second, last 60 s
  bool done = false;                // policy_version >= steps
};

// One accepted file of a step, in acceptance order.
struct AcceptedFile {
  std::string name;  // <node>-<submission>.parquet
  std::string node_address;
  int64_t submission = 0;
  std::string sha256;
  int64_t samples = 0;         // rows
  int64_t signal_samples = 0;  // rows in groups whose rewards are not all equal
};

// The URL clients use: orchestrator.url, else http://<orchestrator.host>:<orchestrator.port>.
std::string client_url(const Config& config);

class Client {
 public:
  // base_url like "http://127.0.0.1:8400"; `token` is sent as a bearer token (trainer calls).
  explicit Client(std::string base_url, std::string token = "", double timeout_s = 30);
  ~Client();

  Status status();
  // POST /submissions (node, step, submission, sha256, size) for a signed upload URL, then PUT
  // the bytes there. Returns the final status ("accepted", or "pending" once validators exist);
  // Error with the server's reason when the upload is refused or rejected.
  std::string submit(const std::string& node_address, int64_t step, int64_t submission,
                     std::string_view file_bytes);
  // GET /steps/<step>/accepted
  std::vector<AcceptedFile> accepted(int64_t step);
  // GET /rollouts/step_<step>/<name>: the bytes of an accepted file.
  std::string download(int64_t step, const std::string& name);
  // POST /trainer/version: the trainer has published policy version `version`; a non-empty
  // `public_key` (64 hex digits) is recorded as the key that signs its checkpoint manifests.
  void publish_version(int64_t version, const std::string& public_key = "");

  // POST /nodes: registers `node` (its address, signed with the current time) from this
  // machine's IP, so that relays serve it. Error when refused (e.g. the node was evicted).
  void register_node(const Identity& node);
  // POST /nodes/<address>/evict (needs the trainer token): `address` is refused from now on.
  void evict(const std::string& address, const std::string& reason);
  // GET /allowlist: the IPs relays may serve, and the revision that changes with them.
  Allowlist allowlist();
  // GET /nodes (needs the trainer token when the orchestrator has one)
  std::vector<Node> nodes();

  const std::string& base_url() const { return base_url_; }

 private:
  std::string base_url_, token_;
  double timeout_s_;
};

}  // namespace trellis::orchestrator
