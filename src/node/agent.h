// `trellis node`: the agent each machine of a swarm runs (specs/protocol.md §3-4). It holds the
// node's key, measures the machine's hardware and publishes both, with the URL it listens on, to
// a discovery service (again every third of the service's ttl). It need not know any
// orchestrator: it waits for an invite, and accepts one that is for this node, signed by a pool it
// serves (node.pools), unexpired and never used before. It then registers at the URL the invite
// names (with the invite's nonce) and sends a heartbeat every interval the orchestrator asks for.
// Each heartbeat's answer names the node's task (a role and its config); the agent runs it as a
// supervised child process (`trellis infer`, `validate` or `relay` with the node's key), restarts
// it when it fails (with a backoff while it keeps failing quickly), and replaces it when the task
// changes. When the orchestrator refuses a heartbeat (the node is dead, evicted or unknown), the
// agent stops its task and waits for the next invite; an invite from the pool it serves (which
// counts it as dead) lets it rejoin without stopping its task.
//
// Everything a task keeps lives in the node's data directory, so a restarted task picks up where
// the last one stopped: its policy versions (a weights cache, verified against the trainer's
// signature before reuse: pipeline/policy_fetcher.h) and its log. The pool it serves is kept
// there too (pool.json), so a restarted agent goes on sending heartbeats. A task ends with its
// agent, even one killed outright (run/child_process.h).
//
// The agent's HTTP endpoint (bounded bodies, a few threads):
//   GET  /healthz    200 "ok"
//   GET  /status     {address, state, pool, orchestrator_url, restarts, quick_failures,
//                    task_log, last_failure}: quick_failures counts the task's failures in a row
//                    within 30 s of its start (a launcher gives up on a task that cannot start)
//   POST /invite     an invite (orchestrator/invite.h) -> 200 {accepted: true}; 403 with the
//                    reason it is refused; 409 while the node serves another pool
//   GET  /logs?lines=N   the newest N lines (at most 10,000) of the current task's log, for a
//                    request signed by a pool the node serves (its orchestrator's key)
#pragma once

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "common/config.h"

namespace trellis::node {

struct AgentOptions {
  std::string name = "node";
  std::filesystem::path data_dir;  // key, policies/, tasks/, logs/, node.url
  std::filesystem::path key_file;  // "" = <data_dir>/node.key
  std::string host = "127.0.0.1";
  int port = 0;
  std::string endpoint;  // "" = http://<host>:<port>
  std::string discovery_url;
  std::vector<std::string> pools;  // orchestrator addresses whose invites it accepts
  double restart_backoff_s = 1;
  std::filesystem::path trellis_binary;  // what the tasks run
  std::string software_version;          // published to discovery

  // [node]; data_dir "" = <run_dir>/nodes/<name>. Error naming the key for a missing
  // discovery_url, a pool that is not an address, or a port out of range.
  static AgentOptions from_config(const Config& config, const std::filesystem::path& run_dir);
};

// Runs the agent until `stop` (then stops its task); Error when it cannot start (its port, its
// key, its data directory).
void run_agent(const AgentOptions& options, const std::atomic<bool>& stop);

}  // namespace trellis::node
