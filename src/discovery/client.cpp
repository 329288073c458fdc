#include "discovery/client.h"

#include <httplib.h>

#include <chrono>

#include <fmt/format.h>

#include "common/error.h"
#include "common/hashing.h"
#include "common/http_service.h"
#include "common/json.h"
#include "common/request_signing.h"

namespace trellis::discovery {
namespace {

std::string answer(const httplib::Result& res) {
  if (!res) return "no answer (" + httplib::to_string(res.error()) + ")";
  try {
    return fmt::format("HTTP {}: {}", res->status,
                       Json::parse(res->body).at("error").get<std::string>());
  } catch (const std::exception&) {
    return fmt::format("HTTP {}", res->status);
  }
}

}  // namespace

Client::Client(std::string base_url, double timeout_s)
    : base_url_(std::move(base_url)), timeout_s_(timeout_s) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
}

const std::string& Client::id() {
  if (!id_.empty()) return id_;
  auto c = http_client(base_url_, timeout_s_);
  auto res = c.Get("/status");
  if (!res || res->status != 200) fail(base_url_ + "/status", "{}", answer(res));
  try {
    id_ = Json::parse(res->body).at("id").get<std::string>();
  } catch (const std::exception& e) {
    fail(base_url_ + "/status", "no id in the answer: {}", e.what());
  }
  return id_;
}

double Client::publish(const Identity& node, const NodeMetadata& m) {
  if (m.address != node.address()) {
    fail("discovery", "metadata of {} cannot be published with the key of {}", m.address,
         node.address());
  }
  const std::string path = "/nodes/" + m.address, body = to_json(m).dump();
  auto c = http_client(base_url_, timeout_s_);
  auto res = c.Put(path, signed_headers(node, id(), "PUT", path, sha256_hex(body)), body,
                   "application/json");
  if (!res || res->status != 200) fail(base_url_ + path, "publication refused: {}", answer(res));
  try {
    return Json::parse(res->body).at("ttl_s").get<double>();
  } catch (const std::exception& e) {
    fail(base_url_ + path, "no ttl_s in the answer: {}", e.what());
  }
}

std::vector<DiscoveredNode> Client::nodes(const Identity& reader) {
  auto c = http_client(base_url_, timeout_s_);
  auto res = c.Get("/nodes", signed_headers(reader, id(), "GET", "/nodes", sha256_hex("")));
  if (!res || res->status != 200) fail(base_url_ + "/nodes", "listing refused: {}", answer(res));
  std::vector<DiscoveredNode> out;
  const std::string where = base_url_ + "/nodes";
  const Json j = parse_json(res->body, where);
  if (!j.contains("nodes") || !j["nodes"].is_array()) fail(where, "no node list in the answer");
  for (const Json& n : j["nodes"]) {
    DiscoveredNode d;
    d.metadata = parse_node_metadata(n, json_required<std::string>(n, "address", where), where);
    d.ip = json_required<std::string>(n, "ip", where);
    d.first_seen = json_required<double>(n, "first_seen", where);
    d.last_seen = json_required<double>(n, "last_seen", where);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace trellis::discovery
