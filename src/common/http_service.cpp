#include "common/http_service.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/error.h"
#include "common/exception_message.h"
#include "common/ip_address.h"
#include "common/logging.h"
#include "common/source_address.h"

namespace trellis {

void refuse(int status, const std::string& code, const std::string& message) {
  throw Refusal(status, code, message);
}

void reply_json(httplib::Response& res, const Json& j, int status) {
  res.status = status;
  res.set_content(json_text(j), "application/json");
}

int port_setting(const Config& config, const std::string& key) {
  const int64_t port = config.get_at_least<int64_t>(key, 0);
  if (port > 65535) fail(key, "a port is at most 65535, got {}", port);
  return static_cast<int>(port);
}

std::vector<std::string> trusted_proxies_setting(const Config& config, const std::string& key) {
  std::vector<std::string> proxies = config.get_list<std::string>(key);
  for (size_t i = 0; i < proxies.size(); ++i) {
    if (!is_ip_address(proxies[i])) {
      fail(fmt::format("{}[{}]", key, i),
           "'{}' is not an IP address (the address nginx connects from, e.g. \"127.0.0.1\")",
           proxies[i].substr(0, 100));
    }
  }
  return proxies;
}

std::string client_ip(const httplib::Request& req,
                      const std::vector<std::string>& trusted_proxies) {
  const std::string remote = canonical_ip(req.remote_addr);
  if (std::none_of(trusted_proxies.begin(), trusted_proxies.end(),
                   [&](const std::string& proxy) { return canonical_ip(proxy) == remote; })) {
    return remote;
  }
  const std::string real = req.get_header_value("X-Real-IP");
  if (!is_ip_address(real)) {
    refuse(400, "malformed_request",
           fmt::format("the request came through the trusted proxy {} without an X-Real-IP "
                       "address (proxy_set_header X-Real-IP $remote_addr)",
                       req.remote_addr));
  }
  return canonical_ip(real);
}

SignedHeaders require_signed_request(const httplib::Request& req, const std::string& client,
                                     const std::string& id, const std::string& body_sha256,
                                     NonceWindow& nonces, const std::string& where) {
  const SignedHeaders h{req.get_header_value(kSignerHeader), req.get_header_value(kTimestampHeader),
                        req.get_header_value(kNonceHeader), req.get_header_value(kSignatureHeader)};
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const SignatureCheck check =
      check_signed_request(h, id, req.method, req.target, body_sha256, now, client, nonces);
  if (check == SignatureCheck::kBusy) {
    // Clients that all share a loopback address are most likely behind a proxy on this machine
    // that the config does not trust: then they share one address's share of the window.
    refuse(503, "busy",
           fmt::format("{}: {}{}", where, describe(check, h, now, nonces.window_s()),
                       is_loopback_address(client)
                           ? fmt::format("; this request came from {}: behind a reverse proxy "
                                         "on this machine, list it in trusted_proxies "
                                         "(orchestrator or discovery) so that each client "
                                         "counts by its own address",
                                         client)
                           : ""));
  }
  if (check != SignatureCheck::kOk) {
    refuse(401, "bad_signature",
           fmt::format("{}: {}", where, describe(check, h, now, nonces.window_s())));
  }
  return h;
}

httplib::Server::Handler guarded_handler(std::string service, HttpHandler fn) {
  return [service = std::move(service), fn = std::move(fn)](const httplib::Request& req,
                                                            httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const Refusal& e) {
      log::info("{}: refused {} {} from {}: {}", service, req.method, req.path, req.remote_addr,
                e.what());
      reply_json(res, {{"error", e.what()}, {"code", e.code}}, e.status);
    } catch (const Error& e) {
      reply_json(res, {{"error", e.what()}, {"code", "malformed_request"}}, 400);
    } catch (const std::exception& e) {
      log::error("{}: {} {}: {}", service, req.method, req.path, message_of(e));
      reply_json(res, {{"error", std::string("internal error: ") + message_of(e)}}, 500);
    }
  };
}

httplib::Client http_client(const std::string& base_url, double timeout_s) {
  httplib::Client c(base_url);
  if (const std::string from = source_address(); !from.empty()) c.set_interface(from);
  const auto t = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(timeout_s));
  c.set_connection_timeout(t);
  c.set_read_timeout(t);
  c.set_write_timeout(t);
  return c;
}

namespace {

// The most of a server's reason or code that goes into an error message.
constexpr size_t kMaxReasonChars = 300;

}  // namespace

std::string HttpReply::reason() const {
  if (!status) return error;
  std::string why;
  try {
    why = parse_json(body, "").at("error").get<std::string>();
  } catch (...) {
    why = fmt::format("HTTP {}: {}", status, body);
  }
  if (why.size() > kMaxReasonChars) why = why.substr(0, kMaxReasonChars) + "...";
  return why;
}

std::string HttpReply::code() const {
  try {
    std::string c = parse_json(body, "").value("code", "");
    return c.size() <= kMaxReasonChars ? c : "";
  } catch (...) {
    return "";
  }
}

HttpReply http_send(httplib::Client& c, const char* method, const std::string& path,
                    httplib::Headers headers, std::string body, const char* content_type,
                    size_t max_bytes) {
  httplib::Request req;
  req.method = method;
  req.path = path;
  req.headers = std::move(headers);
  if (content_type) req.headers.emplace("Content-Type", content_type);
  req.body = std::move(body);
  HttpReply reply;
  bool too_large = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (n > max_bytes - reply.body.size()) {
      too_large = true;
      return false;  // httplib stops reading and closes the connection
    }
    reply.body.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool answered = c.send(req, res, error);  // the overload that does not copy the request
  if (too_large) {
    reply.error = fmt::format("the answer is larger than the {} bytes it may hold", max_bytes);
    reply.body.clear();
  } else if (!answered) {
    reply.error = httplib::to_string(error);
  } else {
    reply.status = res.status;
  }
  return reply;
}

httplib::Headers signed_headers(const Identity& who, const std::string& id,
                                const std::string& method, const std::string& target,
                                const std::string& body_sha256) {
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  httplib::Headers headers;
  for (auto& [k, v] : sign_request(who, id, method, target, body_sha256, now))
    headers.emplace(std::move(k), std::move(v));
  return headers;
}

}  // namespace trellis
