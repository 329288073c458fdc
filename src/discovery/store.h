// Where the discovery service keeps what nodes published: per address its metadata, the IP it
// published from and when. Entries a node stopped refreshing expire after `ttl_s`. Backends:
// SQLite (embedded default, below) and Redis (redis_store.h, for production).
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "common/sqlite.h"
#include "discovery/node_metadata.h"

namespace trellis::discovery {

struct DiscoveredNode {
  NodeMetadata metadata;
  std::string ip;
  double first_seen = 0, last_seen = 0;  // unix seconds
};

struct StoreLimits {
  int64_t max_nodes_per_ip = 8;  // live addresses publishing from one IP
  int64_t max_nodes = 10000;     // live addresses in all
  double ttl_s = 300;            // an entry not refreshed for this long is gone
};

enum class Published {
  kPublished,
  kReplayed,     // signed before this node's newest publication
  kIpFull,       // its IP has max_nodes_per_ip other live nodes
  kServiceFull,  // max_nodes live nodes
};

// What a backend keeps; each call is atomic (two publishers from one IP never both squeeze under
// its limit). A new store records a fresh id (`name`-<64 random bits>), which clients sign their
// requests for; an existing one keeps its own.
class Store {
 public:
  virtual ~Store() = default;
  virtual const std::string& id() const = 0;
  // Records `m` as published from `ip` with a request signed at `signed_at`, at `now` (unix s).
  virtual Published publish(const NodeMetadata& m, const std::string& ip, int64_t signed_at,
                            double now) = 0;
  // Every live node, by address.
  virtual std::vector<DiscoveredNode> nodes(double now) = 0;
  virtual int64_t live_count(double now) = 0;
};

// The embedded default: one SQLite database.
class SqliteStore : public Store {
 public:
  SqliteStore(const std::filesystem::path& path, const std::string& name, StoreLimits limits);

  const std::string& id() const override { return id_; }
  Published publish(const NodeMetadata& m, const std::string& ip, int64_t signed_at,
                    double now) override;
  std::vector<DiscoveredNode> nodes(double now) override;
  int64_t live_count(double now) override;

 private:
  std::mutex mu_;
  sqlite::Database db_;
  StoreLimits limits_;
  std::string id_;
};

}  // namespace trellis::discovery
