#include "common/ip_address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstdint>

#include "common/error.h"

namespace trellis {

bool is_ip_address(const std::string& text) {
  in_addr v4{};
  in6_addr v6{};
  return inet_pton(AF_INET, text.c_str(), &v4) == 1 || inet_pton(AF_INET6, text.c_str(), &v6) == 1;
}

namespace {

// The first 12 bytes of an IPv4-mapped IPv6 address (::ffff:a.b.c.d), and of a NAT64 one
// (64:ff9b::a.b.c.d, the well-known prefix): both carry an IPv4 address in their last 4.
constexpr unsigned char kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
constexpr unsigned char kNat64Prefix[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};

bool has_prefix(const unsigned char* v6, const unsigned char (&prefix)[12]) {
  return std::equal(prefix, prefix + 12, v6);
}

// An IPv4 address (network byte order, as in in_addr) against IANA's special-purpose registry.
bool is_public_ipv4(const unsigned char* a) {
  const auto in = [&](unsigned b0, unsigned b1, unsigned b2, int bits) {
    const uint32_t ip = uint32_t{a[0]} << 24 | uint32_t{a[1]} << 16 | uint32_t{a[2]} << 8 | a[3];
    const uint32_t net = b0 << 24 | b1 << 16 | b2 << 8;
    const uint32_t mask = ~uint32_t{0} << (32 - bits);
    return (ip & mask) == net;
  };
  return !(in(0, 0, 0, 8) ||        // "this network"; 0.0.0.0 reaches the local host
           in(10, 0, 0, 8) ||       // private
           in(100, 64, 0, 10) ||    // shared address space (carrier-grade NAT)
           in(127, 0, 0, 8) ||      // loopback
           in(169, 254, 0, 16) ||   // link-local (cloud metadata services)
           in(172, 16, 0, 12) ||    // private
           in(192, 0, 0, 24) ||     // IETF protocol assignments
           in(192, 0, 2, 24) ||     // documentation
           in(192, 88, 99, 24) ||   // 6to4 relay anycast (deprecated)
           in(192, 168, 0, 16) ||   // private
           in(198, 18, 0, 15) ||    // benchmarking
           in(198, 51, 100, 24) ||  // documentation
           in(203, 0, 113, 24) ||   // documentation
           in(224, 0, 0, 4) ||      // multicast
           in(240, 0, 0, 4));       // reserved, and the broadcast address
}

}  // namespace

bool is_public_address(const std::string& ip) {
  in_addr v4{};
  if (inet_pton(AF_INET, ip.c_str(), &v4) == 1)
    return is_public_ipv4(reinterpret_cast<const unsigned char*>(&v4.s_addr));
  in6_addr v6{};
  if (inet_pton(AF_INET6, ip.c_str(), &v6) != 1) return false;
  const unsigned char* b = v6.s6_addr;
  if (has_prefix(b, kMappedPrefix) || has_prefix(b, kNat64Prefix)) return is_public_ipv4(b + 12);
  if (b[0] == 0x20 && b[1] == 0x02) return is_public_ipv4(b + 2);  // 6to4: 2002:AABB:CCDD::/48
  // Outside global unicast, 2000::/3: ::1, fc00::/7, fe80::/10, ff00::/8, ...
  if ((b[0] & 0xe0) != 0x20) return false;
  // 2001::/23, IETF protocol assignments (Teredo, ORCHID, ...), and 2001:db8::/32, documentation.
  if (b[0] == 0x20 && b[1] == 0x01 && (b[2] < 0x02 || (b[2] == 0x0d && b[3] == 0xb8))) return false;
  return true;
}

std::string canonical_ip(const std::string& text) {
  in6_addr v6{};
  char out[INET6_ADDRSTRLEN] = {0};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (has_prefix(v6.s6_addr, kMappedPrefix)) {
      inet_ntop(AF_INET, v6.s6_addr + 12, out, sizeof out);
    } else {
      inet_ntop(AF_INET6, &v6, out, sizeof out);
    }
    return out;
  }
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return inet_ntop(AF_INET, &v4, out, sizeof out);
  return text;
}

bool is_loopback_address(const std::string& ip) {
  const std::string canonical = canonical_ip(ip);
  in_addr v4{};
  if (inet_pton(AF_INET, canonical.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return canonical == "::1";
}

std::string subscriber_block(const std::string& ip) {
  in6_addr v6{};
  if (inet_pton(AF_INET6, ip.c_str(), &v6) != 1) return ip;
  const unsigned char* b = v6.s6_addr;
  if (has_prefix(b, kMappedPrefix)) return canonical_ip(ip);  // the IPv4 address
  std::fill(v6.s6_addr + 8, v6.s6_addr + 16, 0);
  char text[INET6_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET6, &v6, text, sizeof text);
  return std::string(text) + "/64";
}

HostPort parse_host_port(const std::string& text, const std::string& what) {
  const auto bad = [&](const char* why) {
    fail(what, "'{}' is not HOST:PORT ({})", text.substr(0, 100), why);
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) bad("no host or no port");
  HostPort hp{text.substr(0, colon), 0};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data() + colon + 1, end, hp.port);
  if (ec != std::errc() || ptr != end || hp.port < 1 || hp.port > 65535)
    bad("the port is not a number from 1 to 65535");
  return hp;
}

}  // namespace trellis
