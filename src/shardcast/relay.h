// A SHARDCAST relay (`trellis relay`, specs/shardcast.md §3): pulls every version its upstreams
// (the trainer's origin, or other relays: a tree) list, and serves what it holds with the built-in
// server (shard_server.h). A new upstream version is listed at once with complete = false and its
// shards are served as they land (pipelining): each is hash-checked and renamed into place, so a
// partial shard is never served. Versions gone from upstream, or beyond `keep`, are unlisted and
// then deleted. The allowlist of active nodes is polled from the orchestrator; in production the
// relay also writes it as an nginx include and runs a reload command (nginx serves data_dir).
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "shardcast/manifest.h"
#include "shardcast/relay_selection.h"
#include "shardcast/shard_fetcher.h"
#include "shardcast/shard_server.h"

namespace trellis::shardcast {

struct RelaySettings {
  std::string name = "relay";
  ServerOptions server;                // host, port, data_dir, limits, static allowlist
  std::vector<std::string> upstreams;  // [] = serve data_dir as it is
  double poll_s = 2;
  int64_t keep = 5;
  FetchOptions pull;
  std::string allowlist_url;    // the orchestrator; "" = only server.allow applies
  std::string allowlist_token;  // the orchestrator's relay token (GET /allowlist needs it)
  double allowlist_poll_s = 1;
  std::filesystem::path nginx_allowlist;  // "" = no nginx
  std::string nginx_reload;               // command run after nginx_allowlist changes

  // [relay] and shardcast.keep; data_dir "" = <run_dir>/shardcast/<name>. Error naming the key
  // for a bad value (an allowlist entry that is not an address, a negative limit).
  static RelaySettings from_config(const Config& config, const std::filesystem::path& run_dir);
};

class Relay {
 public:
  explicit Relay(RelaySettings settings);
  ~Relay();  // stop()
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  int start();  // the server, the puller and the allowlist poller; returns the port
  void stop();
  std::string url() const { return server_.url(); }
  const RelaySettings& settings() const { return settings_; }

 private:
  void pull_loop();
  void pull_once();
  // Pulls what `entry` (in local_) lacks: its delta, then its full file, made here by applying
  // the delta to the base when this relay holds both, else pulled too.
  void pull_version(VersionEntry& entry, const std::vector<std::optional<Manifest>>& upstream);
  // Writes `entry`'s full shards from its delta (all pulled) and `base`. Error when a tensor of
  // the result does not match its signed hash.
  void materialize(const VersionEntry& entry, const VersionEntry& base);
  void allowlist_loop();
  void refresh_allowlist();
  // Tells the orchestrator (POST /relays) which versions this relay holds, for its dashboard.
  void report_versions();
  void write_local(const Manifest& m);  // manifest.json, and held_
  std::string extra_metrics() const;

  RelaySettings settings_;
  ShardServer server_;
  RelaySelector upstreams_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopping_{false};
  std::thread puller_, allowlister_;
  Manifest local_;             // what manifest.json says; only the puller changes it
  std::vector<int64_t> held_;  // its complete versions, for the other threads (under mu_)
  std::optional<std::vector<std::string>> allowlist_;  // the orchestrator's last answer
  std::atomic<int64_t> versions_pulled_{0}, shards_pulled_{0}, pull_failures_{0},
      versions_from_delta_{0};
};

}  // namespace trellis::shardcast
