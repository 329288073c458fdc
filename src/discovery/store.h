// Where the discovery service keeps what nodes published: one row per address with its metadata,
// the IP it published from and when. The embedded default is SQLite (this file); every read and
// write is one transaction, so two publishers from one IP cannot both squeeze under its limit.
// Entries a node stopped refreshing expire after `ttl_s`.
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

class SqliteStore {
 public:
  // Opens (creating if needed) the database at `path`; a new one records a fresh id
  // (`name`-<64 random bits>), which clients sign their requests for.
  SqliteStore(const std::filesystem::path& path, const std::string& name, StoreLimits limits);

  const std::string& id() const { return id_; }
  // Records `m` as published from `ip` with a request signed at `signed_at`, at `now`.
  Published publish(const NodeMetadata& m, const std::string& ip, int64_t signed_at, double now);
  // Every live node, by address.
  std::vector<DiscoveredNode> nodes(double now);
  int64_t live_count(double now);

 private:
  std::mutex mu_;
  sqlite::Database db_;
  StoreLimits limits_;
  std::string id_;
};

}  // namespace trellis::discovery
