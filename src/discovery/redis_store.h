// The discovery store in Redis (production: several discovery servers, or a Redis the operator
// already runs). Per node a hash `<prefix>node:<address>`; the sorted sets `<prefix>live` and
// `<prefix>ip:<ip>` of addresses by their last publication. A publication is one Lua script, so
// its expiry sweep, limit checks and writes are atomic, as a transaction is in SQLite.
#pragma once

#include <mutex>
#include <string>

#include "discovery/store.h"

struct redisContext;

namespace trellis::discovery {

class RedisStore : public Store {
 public:
  // Connects to `address` (HOST:PORT); Error naming it when Redis does not answer.
  RedisStore(const std::string& address, const std::string& prefix, const std::string& name,
             StoreLimits limits);
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
};

}  // namespace trellis::discovery
