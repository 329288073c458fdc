#include "common/ip_address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>

#include "common/error.h"

namespace trellis {

bool is_ip_address(const std::string& text) {
  in_addr v4{};
  in6_addr v6{};
  return inet_pton(AF_INET, text.c_str(), &v4) == 1 || inet_pton(AF_INET6, text.c_str(), &v6) == 1;
}

std::string subscriber_block(const std::string& ip) {
  in6_addr v6{};
  if (inet_pton(AF_INET6, ip.c_str(), &v6) != 1) return ip;
  const unsigned char* b = v6.s6_addr;
  static const unsigned char kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::equal(b, b + 12, kMappedPrefix))
    return fmt::format("{}.{}.{}.{}", b[12], b[13], b[14], b[15]);
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
