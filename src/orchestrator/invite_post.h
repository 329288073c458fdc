// Delivery of the invite sweep's invites (invite_sweep.h) to node endpoints: URLs that strangers
// published in discovery. All of a sweep's invites are posted at once (libcurl's multi interface,
// on the calling thread), and each gets one deadline for the whole exchange, so an endpoint that
// never answers, or trickles its answer a byte at a time, costs the sweep that deadline and
// delays no other node's invite. Nothing of an answer is read but its status line and at most
// kMaxInviteHeaderBytes of headers: the transfer ends at the first byte of a body. Unless the pool
// is on a private network, no invite goes to an address the public internet does not reach
// (is_public_address), checked on the address each connection is about to use, so that a name
// that resolves to one (or comes to, between a check and the connection) is caught too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trellis::orchestrator {

// Headers of an invite's answer read at most; more ends the exchange as failed.
inline constexpr int64_t kMaxInviteHeaderBytes = 64 * 1024;

struct InvitePost {
  // An http:// or https:// URL; the invite goes to /invite at its host and port (any path,
  // query or credentials in it are dropped).
  std::string endpoint;
  std::string body;  // the signed invite's JSON
};

struct InviteAnswer {
  int status = 0;     // the endpoint's HTTP status; 0 when none came within the deadline
  std::string error;  // why no status came, or why the answer was refused ("" otherwise)
  // The address a connection was refused for under InviteReach::kPublic ("" when none was).
  std::string refused_address;
  bool accepted() const { return status == 200 && error.empty(); }
};

// Where invites may go: kPublic refuses a connection to any address the public internet does not
// reach (loopback, private, link-local, ...); kAny is for a pool whose nodes are on a private
// network (orchestrator.invite_private_addresses).
enum class InviteReach { kPublic, kAny };

// POSTs every invite at once and returns one answer per post, in order, within about
// `deadline_s` (each exchange, connecting and name lookup included, is cut off there). Never
// throws for what an endpoint does; an error only when libcurl cannot start. No proxy is used:
// an invite goes straight to its node.
std::vector<InviteAnswer> post_invites(const std::vector<InvitePost>& posts, double deadline_s,
                                       InviteReach reach);

}  // namespace trellis::orchestrator
