// IP addresses as text, for the lists that name peers (relay allowlists, trusted proxies).
#pragma once

#include <string>

namespace trellis {

// Whether `text` is one IPv4 address in dotted-quad form or one IPv6 address (no network, no
// host name, nothing else).
bool is_ip_address(const std::string& text);

}  // namespace trellis
