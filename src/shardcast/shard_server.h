// The built-in SHARDCAST HTTP server: serves a data directory's manifest.json, probe.bin and
// v<N>/shard_*.bin (specs/shardcast.md §1) under the allowlist and per-IP limits of
// access_control.h. The trainer's origin and every `trellis relay` use it; nginx (nginx_config.h)
// serves the same directory with the same rules in production.
//
//   GET /manifest.json, /probe.bin, /v<N>/shard_NNNNN.bin   200 the file; 404 not (yet) here
//       403 the client's IP is not allowed; 429 over its request rate (Retry-After: 1)
//   GET /healthz, /metrics                                  always answered
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shardcast/access_control.h"

namespace httplib {
class Server;
}

namespace trellis::shardcast {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = any free port
  std::filesystem::path data_dir;
  AccessLimits limits;
  std::vector<std::string> allow;  // static allowlist entries; [] = open unless set_dynamic()
  int threads = 32;                // concurrent transfers
  std::string name = "shardcast";  // in logs and metric labels
};

class ShardServer {
 public:
  explicit ShardServer(ServerOptions options);
  ~ShardServer();  // stop()
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  // Binds host:port and serves on threads of its own; returns the port. Error naming the address
  // when it cannot bind.
  int start();
  void stop();              // idempotent
  std::string url() const;  // http://host:port
  AccessControl& access() { return access_; }
  // Prometheus text: requests by answer, bytes sent, then `extra()`'s lines (the relay's).
  std::string metrics() const;
  void set_extra_metrics(std::function<std::string()> extra) { extra_ = std::move(extra); }

 private:
  void routes();

  ServerOptions options_;
  AccessControl access_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::function<std::string()> extra_;
  int port_ = 0;
  std::atomic<int64_t> served_{0}, not_found_{0}, forbidden_{0}, limited_{0}, bytes_sent_{0};
};

}  // namespace trellis::shardcast
