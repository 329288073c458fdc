// What every HTTP server of Trellis refuses before it reads a request's body (cpp-httplib reads
// the body after the pre-routing handler and enforces its payload limit only for bodies that
// announce their length): chunked bodies, compressed bodies (they would be inflated without a
// bound) and bodies longer than the route takes. Servers call unbounded_body() first thing
// in their pre-routing handler, with the route's limit.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <optional>
#include <string>

namespace trellis {

// Why a request's body is refused before it is read.
struct BodyRefusal {
  int status = 0;
  std::string code, message;
};

// The refusal of `req`'s body, or nothing when it may be read: Transfer-Encoding of any kind
// (411), a Content-Encoding other than identity (415), a Content-Length that is malformed (400)
// or above `max_body_bytes` (413). A server answers it with the connection closed (so the unread
// body is never parsed as a request).
std::optional<BodyRefusal> unbounded_body(const httplib::Request& req, size_t max_body_bytes);

// For a server whose only pre-routing check is this one (discovery, the node agent): bodies over
// `max_body_bytes`, chunked or compressed are answered with their refusal before they are read.
void refuse_unbounded_bodies(httplib::Server& svr, size_t max_body_bytes);

// Answers `status` with {"error": message, "code": code} and closes the connection.
void refuse_and_close(httplib::Response& res, int status, const std::string& code,
                      const std::string& message);

}  // namespace trellis
