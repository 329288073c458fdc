#include "common/http_service.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/error.h"
#include "common/ip_address.h"

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
  if (std::find(trusted_proxies.begin(), trusted_proxies.end(), req.remote_addr) ==
      trusted_proxies.end()) {
    return req.remote_addr;
  }
  const std::string real = req.get_header_value("X-Real-IP");
  if (!is_ip_address(real)) {
    refuse(400, "malformed_request",
           fmt::format("the request came through the trusted proxy {} without an X-Real-IP "
                       "address (proxy_set_header X-Real-IP $remote_addr)",
                       req.remote_addr));
  }
  return real;
}

SignedHeaders require_signed_request(const httplib::Request& req, const std::string& id,
                                     const std::string& body_sha256, NonceWindow& nonces,
                                     const std::string& where) {
  const SignedHeaders h{req.get_header_value(kSignerHeader), req.get_header_value(kTimestampHeader),
                        req.get_header_value(kNonceHeader), req.get_header_value(kSignatureHeader)};
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const SignatureCheck check =
      check_signed_request(h, id, req.method, req.target, body_sha256, now, nonces);
  if (check == SignatureCheck::kBusy) {
    refuse(503, "busy", fmt::format("{}: {}", where, describe(check, h, now, nonces.window_s())));
  }
  if (check != SignatureCheck::kOk) {
    refuse(401, "bad_signature",
           fmt::format("{}: {}", where, describe(check, h, now, nonces.window_s())));
  }
  return h;
}

}  // namespace trellis
