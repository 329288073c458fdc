// A client of `trellis discovery` (server.h): nodes publish their metadata, the orchestrator lists
// the live nodes. Requests are signed for the service's id, read once from GET /status.
#pragma once

#include <string>
#include <vector>

#include "common/identity.h"
#include "discovery/store.h"

namespace trellis::discovery {

class Client {
 public:
  explicit Client(std::string base_url, double timeout_s = 10);

  // PUT /nodes/<address>, signed by `node` (whose address `m` must carry). Error naming the
  // service and its answer when refused (too many nodes from this IP, a bad signature...).
  // Returns the service's ttl_s: publish again well before it passes.
  double publish(const Identity& node, const NodeMetadata& m);
  // GET /nodes signed by `reader` (the orchestrator's key): every live node.
  std::vector<DiscoveredNode> nodes(const Identity& reader);
  const std::string& id();  // the service's id (GET /status)

 private:
  std::string base_url_, id_;
  double timeout_s_;
};

}  // namespace trellis::discovery
