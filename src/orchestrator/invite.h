// An invite (specs/protocol.md §4): the orchestrator, having found a node in discovery that meets
// its pool's requirements, asks it to join, signed with its key (the ledger's keeper). The invite
// names the pool (the run), its domain, the one node it is for, a fresh nonce, when it expires and
// where the orchestrator listens, so a node need not know the orchestrator's URL in advance: only
// the keys of the pools it is willing to serve. A node accepts an invite once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/identity.h"
#include "common/json.h"

namespace trellis::orchestrator {

struct Invite {
  std::string pool;              // the run ID (the ledger's id)
  std::string domain;            // what the pool trains, e.g. "math"
  std::string node;              // the invited node's address
  std::string nonce;             // 32 hex digits, fresh per invite
  int64_t expires = 0;           // unix seconds
  std::string orchestrator_url;  // where to register and send heartbeats
  std::string issuer;            // the orchestrator's address
  std::string signature;         // the issuer's, of invite_message()
};

std::string invite_message(const Invite& invite);

// An invite of `node` to `pool` by `issuer`, valid for `ttl_s` from `now`.
Invite make_invite(const Identity& issuer, const std::string& pool, const std::string& domain,
                   const std::string& node, const std::string& orchestrator_url, int64_t now,
                   int64_t ttl_s);

Json to_json(const Invite& invite);
// The invite in `j`; Error naming the field for one missing, mistyped or over its bound.
Invite parse_invite(const Json& j, const std::string& where);

// Why `node` must refuse `invite` at `now` ("" to accept): not for this node, from an issuer not in
// `trusted_issuers` (the pools this node serves), a signature that does not verify, expired, or a
// nonce in `used_nonces` (accepted before).
std::string invite_problem(const Invite& invite, const std::string& node, int64_t now,
                           const std::vector<std::string>& trusted_issuers,
                           const std::vector<std::string>& used_nonces);

}  // namespace trellis::orchestrator
