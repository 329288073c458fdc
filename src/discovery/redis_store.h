// The discovery store in Redis (production: several discovery servers, or a Redis the operator
// already runs). Per node a hash `<prefix>node:<address>`; the sorted sets `<prefix>live` and
// `<prefix>ip:<ip>` of addresses by their last publication. A publication is one Lua script, so
// its expiry sweep, limit checks and writes are atomic, as a transaction is in SQLite. A Redis
// that asks for a password gets it (AUTH) on every connection, the reconnections too.
#pragma once

#include <mutex>
#include <string>

#include "discovery/store.h"

struct redisContext;

namespace trellis::discovery {

// Whom the store logs in to Redis as (AUTH; an ACL user on Redis 6 and later). No password: no
// AUTH, for a Redis that takes none. The password travels in clear over TCP, as Redis's protocol
// has it: a Redis on another machine belongs on a private network.
struct RedisLogin {
  std::string user;      // "" = Redis's default user
  std::string password;  // the secret itself: never logged, never part of an error
  std::string source;    // where it came from, for errors: a file or TRELLIS_REDIS_PASSWORD
};

class RedisStore : public Store {
 public:
  // Connects to `address` (HOST:PORT) and logs in; Error naming it when Redis does not answer,
  // wants a password it was not given, or refuses the one it was.
  RedisStore(const std::string& address, const std::string& prefix, const std::string& name,
             StoreLimits limits, RedisLogin login = {});
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  const std::string& id() const override { return id_; }
  Published publish(const NodeMetadata& m, const std::string& ip, int64_t signed_at,
                    double now) override;
  std::vector<DiscoveredNode> nodes(double now) override;
  int64_t live_count(double now) override;

 private:
  std::mutex mu_;  // a hiredis context serves one caller at a time
  redisContext* ctx_ = nullptr;
  std::string address_, prefix_, id_;
  StoreLimits limits_;
  RedisLogin login_;
};

}  // namespace trellis::discovery
