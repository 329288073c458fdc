#include "discovery/client.h"

#include <httplib.h>

#include "common/error.h"
#include "common/hashing.h"
#include "common/http_service.h"
#include "common/json.h"
#include "common/request_signing.h"

namespace trellis::discovery {

// Every answer is read through http_send, so at most kMaxJsonAnswerBytes of it: a node may be
// pointed at any discovery service.

Client::Client(std::string base_url, double timeout_s)
    : base_url_(std::move(base_url)), timeout_s_(timeout_s) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
}

const std::string& Client::id() {
  if (!id_.empty()) return id_;
  auto c = http_client(base_url_, timeout_s_);
  const HttpReply res = http_send(c, "GET", "/status", {}, "", nullptr);
  const std::string where = base_url_ + "/status";
  if (!res.ok()) fail(where, "{}", res.reason());
  id_ = json_required<std::string>(parse_json(res.body, where), "id", where);
  return id_;
}

double Client::publish(const Identity& node, const NodeMetadata& m) {
  if (m.address != node.address()) {
    fail("discovery", "metadata of {} cannot be published with the key of {}", m.address,
         node.address());
  }
  const std::string path = "/nodes/" + m.address, body = to_json(m).dump();
  auto c = http_client(base_url_, timeout_s_);
  const HttpReply res =
      http_send(c, "PUT", path, signed_headers(node, id(), "PUT", path, sha256_hex(body)), body,
                "application/json");
  const std::string where = base_url_ + path;
  if (!res.ok()) fail(where, "publication refused: {}", res.reason());
  return json_required<double>(parse_json(res.body, where), "ttl_s", where);
}

std::vector<DiscoveredNode> Client::nodes(const Identity& reader) {
  auto c = http_client(base_url_, timeout_s_);
  const HttpReply res =
      http_send(c, "GET", "/nodes", signed_headers(reader, id(), "GET", "/nodes", sha256_hex("")),
                "", nullptr);
  const std::string where = base_url_ + "/nodes";
  if (!res.ok()) fail(where, "listing refused: {}", res.reason());
  std::vector<DiscoveredNode> out;
  const Json j = parse_json(res.body, where);
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
