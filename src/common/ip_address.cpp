#include "common/ip_address.h"

#include <arpa/inet.h>

namespace trellis {

bool is_ip_address(const std::string& text) {
  in_addr v4{};
  in6_addr v6{};
  return inet_pton(AF_INET, text.c_str(), &v4) == 1 || inet_pton(AF_INET6, text.c_str(), &v6) == 1;
}

}  // namespace trellis
