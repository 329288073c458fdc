// Requests from the orchestrator to node agents' endpoints: URLs that strangers published in
// discovery (the invite sweep's invites, the operator's fetch of a node's logs). Requests go out
// all at once (libcurl's multi interface, on the calling thread), and each gets one deadline for
// the whole exchange, so an endpoint that never answers, or trickles its answer a byte at a time,
// costs that deadline and delays no other request. An answer is read to a bound: at most
// kMaxEndpointHeaderBytes of headers and max_body_bytes of body. Only http(s), no redirects, no
// proxy, and only the endpoint's scheme, host and port are used (the request's own target is the
// path). Unless the pool is on a private network, no request goes to an address the public
// internet does not reach (is_public_address), checked on the address each connection is about
// to use, so that a name that resolves to one (or comes to, between a check and the connection)
// is caught too.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trellis::orchestrator {

// Headers of an answer read at most; more ends the exchange as failed.
inline constexpr int64_t kMaxEndpointHeaderBytes = 64 * 1024;

// Where requests may go: kPublic refuses a connection to any address the public internet does not
// reach (loopback, private, link-local, ...); kAny is for a pool whose nodes are on a private
// network (orchestrator.invite_private_addresses).
enum class EndpointReach { kPublic, kAny };

struct EndpointRequest {
  // An http:// or https:// URL; any path, query or credentials in it are dropped.
  std::string endpoint;
  std::string method = "POST";
  std::string target;  // the path and query asked for, "/invite" (ours, never a stranger's)
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The answer's body read at most: more is an error. 0 reads none: the exchange ends at its
  // first byte, and the status stands.
  int64_t max_body_bytes = 0;
};

struct EndpointAnswer {
  int status = 0;     // the endpoint's HTTP status; 0 when none came within the deadline
  std::string body;   // at most the request's max_body_bytes
  std::string error;  // why no status came, or why the answer was refused ("" otherwise)
  // The address a connection was refused for under EndpointReach::kPublic ("" when none was).
  std::string refused_address;
  bool ok() const { return status == 200 && error.empty(); }
};

// Sends every request at once and returns one answer per request, in order, within about
// `deadline_s` (each exchange, connecting and name lookup included, is cut off there). Never
// throws for what an endpoint does; an error only when libcurl cannot start.
std::vector<EndpointAnswer> send_to_endpoints(const std::vector<EndpointRequest>& requests,
                                              double deadline_s, EndpointReach reach);

}  // namespace trellis::orchestrator
