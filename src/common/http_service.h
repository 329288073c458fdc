// What the HTTP services of Trellis (the orchestrator, discovery, the node agent) share in their
// handlers: a refusal thrown from anywhere in a handler and answered as {"error", "code"} JSON,
// the client's IP (its connection's, or a trusted proxy's X-Real-IP), and the check of a signed
// request; and on the client side, a connection with time-outs from the process's source address
// and the headers of a signed request.
#pragma once

#include <httplib.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/json.h"
#include "common/request_signing.h"

namespace trellis {

// A refused request: its HTTP status, a short reason code (for metrics and clients), the message.
struct Refusal : std::runtime_error {
  Refusal(int status, std::string code, const std::string& message)
      : std::runtime_error(message), status(status), code(std::move(code)) {}
  int status;
  std::string code;
};

[[noreturn]] void refuse(int status, const std::string& code, const std::string& message);

void reply_json(httplib::Response& res, const Json& j, int status = 200);

// `fn` with every failure answered: a Refusal with its status and code (logged with `service`, the
// client and the reason), an Error as 400 malformed_request, anything else as a logged 500; no
// request crashes the server.
using HttpHandler = std::function<void(const httplib::Request&, httplib::Response&)>;
httplib::Server::Handler guarded_handler(std::string service, HttpHandler fn);

// The settings every service has: its port at `key` (0 = any free port), and the trusted proxies
// at `key` (IP addresses). Error naming the key, or the list element, that is wrong.
int port_setting(const Config& config, const std::string& key);
std::vector<std::string> trusted_proxies_setting(const Config& config, const std::string& key);

// The client's address: the connection's, or behind one of `trusted_proxies` (however each is
// written) the X-Real-IP it sets (anyone else's header is ignored: a node cannot claim another's
// address), as canonical_ip writes it, so that one client has one address in the registry and on
// the allowlist. 400 when a trusted proxy sent none.
std::string client_ip(const httplib::Request& req, const std::vector<std::string>& trusted_proxies);

// The headers of `req` once its signature over (`id`, method, target, the body's SHA-256
// `body_sha256`), timestamp and nonce hold: 401 `bad_signature` for an unsigned, forged, stale or
// replayed request, 503 `busy` when `nonces` is full, in all or for `client` (the client's
// address, client_ip). `where` starts the message.
SignedHeaders require_signed_request(const httplib::Request& req, const std::string& client,
                                     const std::string& id, const std::string& body_sha256,
                                     NonceWindow& nonces, const std::string& where);

// A client of `base_url` whose connections time out after `timeout_s` (connect, read, write) and
// come from the process's source address (source_address.h).
httplib::Client http_client(const std::string& base_url, double timeout_s);

// What a service answered a client, read to at most a bound: a client may be pointed at any
// server, and a hostile one must not make it hold an answer of any size.
struct HttpReply {
  int status = 0;     // 0: no answer (`error` says why)
  std::string body;   // at most the bound
  std::string error;  // the connection's failure, or the answer's size
  bool ok() const { return status == 200; }
  // The server's reason: its JSON {"error": ...}, else "HTTP <status>: <body>", else `error`; cut
  // to a length that fits an error message.
  std::string reason() const;
  // Its JSON {"code": ...}; "" without one (or one no honest server sends).
  std::string code() const;
};

// The most of a service's JSON answer a client holds. The largest honest one, an orchestrator's
// GET /submissions of a long run, is a few MB.
constexpr size_t kMaxJsonAnswerBytes = size_t{64} << 20;

// Sends a request through `c` (without copying `body`) and reads at most `max_bytes` of the
// answer: past that the transfer stops and the reply is an error. `content_type` null: none.
// httplib's time-outs are per read: a peer that trickles its answer holds the caller for as long
// as it likes, so a stranger's endpoint is asked through orchestrator/endpoint_request.h.
HttpReply http_send(httplib::Client& c, const char* method, const std::string& path,
                    httplib::Headers headers, std::string body, const char* content_type,
                    size_t max_bytes = kMaxJsonAnswerBytes);

// The headers of `who`'s request signed now for `id` (request_signing.h), for httplib.
httplib::Headers signed_headers(const Identity& who, const std::string& id,
                                const std::string& method, const std::string& target,
                                const std::string& body_sha256);

}  // namespace trellis
