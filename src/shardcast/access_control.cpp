#include "shardcast/access_control.h"

#include <arpa/inet.h>

#include <algorithm>
#include <optional>

#include "common/error.h"

namespace trellis::shardcast {
namespace {

bool parse_ipv4(const std::string& text, uint32_t& out) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return false;
  out = ntohl(a.s_addr);
  return true;
}

// The n of an IPv4 network "a.b.c.d/n": one or two digits, at most 32.
std::optional<int> prefix_bits(const std::string& text) {
  if (text.empty() || text.size() > 2 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  const int bits = std::stoi(text);
  return bits <= 32 ? std::optional(bits) : std::nullopt;
}

}  // namespace

bool ip_matches(const std::string& ip, const std::string& entry) {
  const auto slash = entry.find('/');
  if (slash == std::string::npos) return canonical_ip(ip) == canonical_ip(entry);
  uint32_t net = 0, addr = 0;
  const auto bits = prefix_bits(entry.substr(slash + 1));
  if (!bits || !parse_ipv4(entry.substr(0, slash), net) || !parse_ipv4(canonical_ip(ip), addr))
    return false;
  const uint32_t mask = *bits == 0 ? 0 : ~uint32_t{0} << (32 - *bits);
  return (net & mask) == (addr & mask);
}

void check_allowlist_entry(const std::string& entry, const std::string& where) {
  uint32_t ignored = 0;
  const auto slash = entry.find('/');
  const bool ok = slash == std::string::npos ? is_ip_address(entry)
                                             : parse_ipv4(entry.substr(0, slash), ignored) &&
                                                   prefix_bits(entry.substr(slash + 1)).has_value();
  if (!ok) fail(where, "'{}' is not an IP address or IPv4 network (a.b.c.d/n)", entry);
}

void AccessControl::set_static(std::vector<std::string> entries) {
  std::lock_guard lock(mu_);
  static_ = std::move(entries);
}

void AccessControl::set_dynamic(std::vector<std::string> ips) {
  std::lock_guard lock(mu_);
  dynamic_.clear();
  for (const auto& ip : ips) dynamic_.insert(canonical_ip(ip));
  dynamic_set_ = true;
}

bool AccessControl::allowed(const std::string& ip) const {
  std::lock_guard lock(mu_);
  if (static_.empty() && !dynamic_set_) return true;
  if (dynamic_.count(canonical_ip(ip))) return true;
  return std::any_of(static_.begin(), static_.end(),
                     [&](const std::string& e) { return ip_matches(ip, e); });
}

void AccessControl::forget_full(Buckets& buckets, size_t& swept_at, double now_s, double rate,
                                double capacity) {
  constexpr size_t kMinSweep = 1024;
  if (buckets.size() < std::max(kMinSweep, 2 * swept_at)) return;
  std::erase_if(buckets, [&](const auto& entry) {
    const Bucket& b = entry.second;
    return b.tokens + (now_s - b.last_s) * rate >= capacity;
  });
  swept_at = buckets.size();
}

size_t AccessControl::tracked_clients() const {
  std::lock_guard lock(mu_);
  return requests_.size() + bytes_.size();
}

bool AccessControl::admit_request(const std::string& ip, double now_s) {
  if (limits_.requests_per_s <= 0) return true;
  const double burst = limits_.burst > 0 ? limits_.burst : std::max(1.0, limits_.requests_per_s);
  std::lock_guard lock(mu_);
  forget_full(requests_, requests_swept_at_, now_s, limits_.requests_per_s, burst);
  Bucket& b = requests_[ip];
  b.tokens = b.last_s < 0 ? burst
                          : std::min(burst, b.tokens + (now_s - b.last_s) * limits_.requests_per_s);
  b.last_s = now_s;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

double AccessControl::reserve_bytes(const std::string& ip, int64_t bytes, double now_s) {
  if (limits_.bytes_per_s <= 0) return 0;
  std::lock_guard lock(mu_);
  // The bucket may go negative: a debt paid back at the limit, which is how long to wait.
  const double capacity = limits_.bytes_per_s / 10;  // 100 ms of burst
  forget_full(bytes_, bytes_swept_at_, now_s, limits_.bytes_per_s, capacity);
  Bucket& b = bytes_[ip];
  b.tokens = b.last_s < 0 ? capacity
                          : std::min(capacity, b.tokens + (now_s - b.last_s) * limits_.bytes_per_s);
  b.last_s = now_s;
  b.tokens -= static_cast<double>(bytes);
  return b.tokens >= 0 ? 0 : -b.tokens / limits_.bytes_per_s;
}

}  // namespace trellis::shardcast
