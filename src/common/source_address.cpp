#include "common/source_address.h"

#include <mutex>

#include "common/error.h"
#include "common/ip_address.h"

namespace trellis {
namespace {

std::mutex mu;
std::string address;  // guarded by mu

}  // namespace

void set_source_address(const Config& config) {
  const std::string ip = config.get<std::string>("network.source_address");
  if (!ip.empty() && !is_ip_address(ip))
    fail("network.source_address", "'{}' is not an IP address of this machine", ip.substr(0, 100));
  std::lock_guard lock(mu);
  address = ip;
}

std::string source_address() {
  std::lock_guard lock(mu);
  return address;
}

}  // namespace trellis
