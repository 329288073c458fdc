#include "discovery/store.h"

#include "common/error.h"
#include "common/hashing.h"

namespace trellis::discovery {

SqliteStore::SqliteStore(const std::filesystem::path& path, const std::string& name,
                         StoreLimits limits)
    : db_(path, sqlite::Database::kReadWrite), limits_(limits) {
  db_.exec(
      "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "CREATE TABLE IF NOT EXISTS nodes (address TEXT PRIMARY KEY, metadata TEXT NOT NULL, ip TEXT "
      "NOT NULL, signed_at INTEGER NOT NULL, first_seen REAL NOT NULL, last_seen REAL NOT NULL);"
      "CREATE INDEX IF NOT EXISTS nodes_by_ip ON nodes (ip, last_seen);");
  sqlite::Transaction tx(db_);
  sqlite::Statement q(db_, "SELECT value FROM meta WHERE key = 'id'");
  if (q.step()) {
    id_ = q.text(0);
  } else {
    id_ = name + "-" + random_hex(8);
    sqlite::Statement(db_, "INSERT INTO meta VALUES ('id', ?)").bind(id_).step();
  }
  tx.commit();
}

Published SqliteStore::publish(const NodeMetadata& m, const std::string& ip, int64_t signed_at,
                               double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  const double live_after = now - limits_.ttl_s;
  sqlite::Statement(db_, "DELETE FROM nodes WHERE last_seen < ?").bind(live_after).step();
  sqlite::Statement before(db_, "SELECT signed_at FROM nodes WHERE address = ?");
  before.bind(m.address);
  const bool known = before.step();
  if (known && signed_at < before.i64(0)) return Published::kReplayed;
  if (!known) {
    sqlite::Statement per_ip(db_, "SELECT COUNT(*) FROM nodes WHERE ip = ?");
    per_ip.bind(ip).step();
    if (per_ip.i64(0) >= limits_.max_nodes_per_ip) return Published::kIpFull;
    sqlite::Statement all(db_, "SELECT COUNT(*) FROM nodes");
    all.step();
    if (all.i64(0) >= limits_.max_nodes) return Published::kServiceFull;
  } else if (sqlite::Statement moved(db_, "SELECT ip FROM nodes WHERE address = ?");
             moved.bind(m.address).step() && moved.text(0) != ip) {
    // Moving to another IP counts against that IP like a new node.
    sqlite::Statement per_ip(db_, "SELECT COUNT(*) FROM nodes WHERE ip = ?");
    per_ip.bind(ip).step();
    if (per_ip.i64(0) >= limits_.max_nodes_per_ip) return Published::kIpFull;
  }
  sqlite::Statement upsert(
      db_,
      "INSERT INTO nodes (address, metadata, ip, signed_at, first_seen, last_seen) VALUES (?, ?, "
      "?, ?, ?, ?) ON CONFLICT (address) DO UPDATE SET metadata = excluded.metadata, ip = "
      "excluded.ip, signed_at = excluded.signed_at, last_seen = excluded.last_seen");
  upsert.bind(m.address).bind(to_json(m).dump()).bind(ip).bind(signed_at).bind(now).bind(now);
  upsert.step();
  tx.commit();
  return Published::kPublished;
}

std::vector<DiscoveredNode> SqliteStore::nodes(double now) {
  std::lock_guard lock(mu_);
  sqlite::Statement q(db_,
                      "SELECT address, metadata, ip, first_seen, last_seen FROM nodes WHERE "
                      "last_seen >= ? ORDER BY address");
  q.bind(now - limits_.ttl_s);
  std::vector<DiscoveredNode> out;
  while (q.step()) {
    DiscoveredNode n;
    const std::string address = q.text(0);
    // Written by publish() from checked metadata: read back with the same checks all the same.
    n.metadata = parse_node_metadata(parse_json(q.text(1), db_.where()), address, db_.where());
    n.ip = q.text(2);
    n.first_seen = q.f64(3);
    n.last_seen = q.f64(4);
    out.push_back(std::move(n));
  }
  return out;
}

int64_t SqliteStore::live_count(double now) {
  std::lock_guard lock(mu_);
  sqlite::Statement q(db_, "SELECT COUNT(*) FROM nodes WHERE last_seen >= ?");
  q.bind(now - limits_.ttl_s).step();
  return q.i64(0);
}

}  // namespace trellis::discovery
