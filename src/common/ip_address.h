// Network addresses as text: IP addresses, for the lists that name peers (relay allowlists,
// trusted proxies), and HOST:PORT, for the servers a config names.
#pragma once

#include <string>

namespace trellis {

// Whether `text` is one IPv4 address in dotted-quad form or one IPv6 address (no network, no
// host name, nothing else).
bool is_ip_address(const std::string& text);

// One text for each address, so that lists compare addresses and not their spellings: inet_ntop's
// form ("2001:db8::1" for "2001:DB8:0::1"), and an IPv4-mapped IPv6 address (::ffff:a.b.c.d, how
// a dual-stack socket reports an IPv4 client) as the IPv4 address. Text that is no IP address
// stands for itself.
std::string canonical_ip(const std::string& text);

// The block of addresses one subscriber holds, which per-address limits count by: an IPv4 address
// as itself (also when written IPv4-mapped, ::ffff:a.b.c.d), an IPv6 address as its /64
// ("2001:db8:1:2::/64"). Text that is no IP address stands for itself.
std::string subscriber_block(const std::string& ip);

// Whether `ip` is a loopback address (127.0.0.0/8, also IPv4-mapped, or ::1). Requests from one
// to a public service most likely came through a reverse proxy on the same machine.
bool is_loopback_address(const std::string& ip);

// Whether `ip` is reachable on the public internet: false for loopback, private (RFC 1918, IPv6
// unique local), shared (100.64.0.0/10), link-local (cloud metadata services live there),
// unspecified, multicast, documentation, benchmarking and reserved addresses (IANA's
// special-purpose registries), for an IPv4 address carried in IPv6 (mapped, NAT64, 6to4) as for
// the IPv4 address, for IPv6 outside 2000::/3, and for text that is no IP address. Where a
// stranger names the address, this keeps what we send off the networks behind us.
bool is_public_address(const std::string& ip);

struct HostPort {
  std::string host;
  int port = 0;
};

// `text` split at its last ':' (so "[::1]:80" works): Error naming `what` and saying why unless
// there is a host and the port is a number from 1 to 65535.
HostPort parse_host_port(const std::string& text, const std::string& what);

}  // namespace trellis
