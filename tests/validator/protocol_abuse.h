// The protocol half of the abuse suite: what a stranger on the network can send a running
// orchestrator and relay (no token, forged or replayed signatures, bodies that never end or
// claim terabytes, forged upload URLs, garbage, a flood), each played over a real socket and
// compared with the answer a defended server gives. The data half (dishonest rollout files) is
// trellis_attack's; attack_suite.cpp plays both against one `trellis run`.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trellis::test {

struct AbuseOutcome {
  std::string name;       // what was tried
  int expected = 0;       // the HTTP status a defended server answers
  int status = 0;         // what it answered (0: no answer)
  int64_t body_sent = 0;  // body bytes the server took before it answered or hung up
  std::string answer;     // the start of its answer, for the failure message
};

// Plays every abuse against the orchestrator at `orchestrator_url` (run `run_id`; a node
// `registered_node` that is registered) and the relay at `relay_url`; returns each outcome.
std::vector<AbuseOutcome> play_protocol_abuses(const std::string& orchestrator_url,
                                               const std::string& relay_url,
                                               const std::string& run_id,
                                               const std::string& registered_node);

// `threads` × `requests` GET /status: the number answered 200.
int64_t flood_status(const std::string& orchestrator_url, int threads, int requests);

// The peak resident memory (VmHWM) of a process, in bytes; 0 if it is gone.
int64_t peak_memory_bytes(pid_t pid);
// The child of `parent` whose command line is `trellis ROLE ...`; -1 if none.
pid_t child_with_role(pid_t parent, const std::string& role);

}  // namespace trellis::test
