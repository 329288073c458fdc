// What a node tells the discovery service about itself (specs/protocol.md §3): its address (its
// Ed25519 public key), the endpoint where its agent listens for invites, the hardware its agent
// measured and its software version. Parsed from a stranger's JSON: every field bounded, anything
// else dropped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"

namespace trellis::discovery {

struct Gpu {
  std::string name;
  int64_t memory_mib = 0;
};

struct Hardware {
  std::string cpu_model;
  int64_t cpu_cores = 0;
  int64_t memory_mib = 0, disk_mib = 0;
  int64_t bandwidth_mbps = 0;  // measured by the agent; 0 = unknown
  std::vector<Gpu> gpus;
};

struct NodeMetadata {
  std::string address;   // 64 lowercase hex digits
  std::string endpoint;  // http(s)://host:port of the node's agent
  Hardware hardware;
  std::string software_version;
};

Json to_json(const NodeMetadata& m);
// The metadata in `j` for `address`; Error naming the field and `where` for anything missing,
// mistyped or out of bounds.
NodeMetadata parse_node_metadata(const Json& j, const std::string& address,
                                 const std::string& where);

bool is_node_address(const std::string& s);

}  // namespace trellis::discovery
