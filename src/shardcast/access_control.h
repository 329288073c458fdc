// Who may download from a SHARDCAST server, and how fast (specs/shardcast.md §3): an allowlist of
// client IPs (static entries from the config, IPv4 CIDRs allowed, plus the active nodes the
// orchestrator lists), a per-IP request rate (token bucket; excess requests get 429) and a per-IP
// bandwidth limit (token bucket in bytes; the server paces what it sends). The same rules are
// written into nginx's configuration for production relays (nginx_config.h). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/ip_address.h"  // is_ip_address, for the entries of allowlists

namespace trellis::shardcast {

struct AccessLimits {
  double requests_per_s = 0;  // per IP; 0 = unlimited
  double burst = 0;           // requests a client may make at once; 0 = max(1, requests_per_s)
  double bytes_per_s = 0;     // per IP; 0 = unlimited
};

// Whether `ip` matches `entry`: an exact address, or an IPv4 network "a.b.c.d/n".
bool ip_matches(const std::string& ip, const std::string& entry);
// Error naming `where` unless `entry` is an IPv4 address, an IPv4 CIDR or an IPv6 address.
void check_allowlist_entry(const std::string& entry, const std::string& where);

class AccessControl {
 public:
  explicit AccessControl(AccessLimits limits) : limits_(limits) {}

  // Static entries (always allowed). With no static entries and no dynamic list the server is open.
  void set_static(std::vector<std::string> entries);
  // The orchestrator's list of active nodes. Once set (even to an empty list) only listed IPs and
  // static entries are allowed, so an evicted node is cut off by the next update.
  void set_dynamic(std::vector<std::string> ips);
  bool allowed(const std::string& ip) const;
  // Takes a request token from `ip`'s bucket; false when the client is over its rate (answer 429).
  bool admit_request(const std::string& ip, double now_s);
  // Reserves `bytes` of `ip`'s bandwidth; returns how many seconds to wait before sending them.
  double reserve_bytes(const std::string& ip, int64_t bytes, double now_s);

  const AccessLimits& limits() const { return limits_; }
  // Clients with a bucket in memory (a full bucket is forgotten: the same as a new one).
  size_t tracked_clients() const;

 private:
  struct Bucket {
    double tokens = 0, last_s = -1;
  };
  using Buckets = std::map<std::string, Bucket>;
  // Forgets the buckets of `buckets` that have refilled to `capacity` by `now_s`, once the map
  // has doubled since the last sweep: memory stays proportional to the clients of the last few
  // seconds, however many addresses a flood comes from.
  static void forget_full(Buckets& buckets, size_t& swept_at, double now_s, double rate,
                          double capacity);
  AccessLimits limits_;
  mutable std::mutex mu_;
  std::vector<std::string> static_;
  std::set<std::string> dynamic_;
  bool dynamic_set_ = false;
  Buckets requests_, bytes_;
  size_t requests_swept_at_ = 0, bytes_swept_at_ = 0;
};

}  // namespace trellis::shardcast
