// The local address this process's outgoing HTTP connections come from ([network]
// source_address; "" = the system's choice). Servers see a node by the address it connects from:
// the orchestrator registers it there and the relays' allowlist lists it. On a machine with
// several addresses it picks one; nodes that share a machine (`trellis run`, tests on loopback)
// take one each (127.0.0.N), so the allowlist tells them apart. Set once, at start, by the
// command that resolved the config; read by every HTTP client (orchestrator, discovery,
// SHARDCAST).
#pragma once

#include <string>

#include "common/config.h"

namespace trellis {

// Error naming network.source_address unless it is "" or one IP address.
void set_source_address(const Config& config);
std::string source_address();

}  // namespace trellis
