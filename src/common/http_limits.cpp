#include "common/http_limits.h"

#include <fmt/format.h>

#include <charconv>

#include "common/json.h"

namespace trellis {

void refuse_and_close(httplib::Response& res, int status, const std::string& code,
                      const std::string& message) {
  res.status = status;
  res.set_header("Connection", "close");
  res.set_content(Json{{"error", message}, {"code", code}}.dump(), "application/json");
}

void refuse_unbounded_bodies(httplib::Server& svr, size_t max_body_bytes) {
  svr.set_payload_max_length(max_body_bytes);
  svr.set_pre_routing_handler(
      [max_body_bytes](const httplib::Request& req, httplib::Response& res) {
        if (const auto refusal = unbounded_body(req, max_body_bytes)) {
          refuse_and_close(res, refusal->status, refusal->code, refusal->message);
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
}

std::optional<BodyRefusal> unbounded_body(const httplib::Request& req, size_t max_body_bytes) {
  if (req.has_header("Transfer-Encoding")) {
    return BodyRefusal{411, "length_required",
                       fmt::format("{} {}: chunked or otherwise transfer-encoded bodies are not "
                                   "accepted; send the body with a Content-Length",
                                   req.method, req.path)};
  }
  const std::string encoding = req.get_header_value("Content-Encoding");
  if (!encoding.empty() && encoding != "identity") {
    return BodyRefusal{415, "encoded_body",
                       fmt::format("{} {}: Content-Encoding '{}' is not accepted; send the body "
                                   "uncompressed",
                                   req.method, req.path, encoding.substr(0, 40))};
  }
  if (!req.has_header("Content-Length")) return std::nullopt;  // no body
  const std::string text = req.get_header_value("Content-Length");
  size_t length = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), length);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return BodyRefusal{400, "malformed_request",
                       fmt::format("{} {}: Content-Length '{}' is not a number of bytes",
                                   req.method, req.path, text.substr(0, 40))};
  }
  if (length > max_body_bytes) {
    return BodyRefusal{413, "too_large",
                       fmt::format("{} {}: a body of {} bytes is more than this route takes ({} "
                                   "bytes)",
                                   req.method, req.path, length, max_body_bytes)};
  }
  return std::nullopt;
}

}  // namespace trellis
