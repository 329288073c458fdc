// `trellis discovery`: the service where nodes publish signed metadata and the orchestrator finds
// them (specs/protocol.md §3). Routes:
//   GET /healthz                 ok
//   GET /status                  {id, nodes}: the id clients sign for, and how many are live
//   PUT /nodes/<address>         the node's metadata, signed by that address (request_signing.h)
//   GET /nodes                   every live node with its endpoint and IP: only for requests
//                                signed by a reader (the orchestrator's key); workers never see
//                                each other
// Every body is bounded before it is read; a node's IP is its connection's (or a trusted proxy's
// X-Real-IP), and one IP may hold at most max_nodes_per_ip live addresses.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "discovery/redis_store.h"
#include "discovery/store.h"

namespace trellis::discovery {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8300;                   // 0 = any free port
  std::filesystem::path data_dir;    // discovery.sqlite, discovery.url
  std::string name = "discovery";    // the start of the service's id
  std::vector<std::string> readers;  // addresses whose signed GET /nodes is answered
  StoreLimits limits;
  std::string backend = "sqlite";                   // sqlite (<data_dir>/discovery.sqlite) or redis
  std::string redis = "127.0.0.1:6379";             // HOST:PORT when backend = redis
  std::string redis_prefix = "trellis:discovery:";  // of every key it writes
  RedisLogin redis_login;                           // no password: no AUTH
  int64_t max_request_bytes = 16 << 10;
  int64_t signature_window_s = 60;
  std::vector<std::string> trusted_proxies;
};

// [discovery] of `config`; data_dir "" = `run_dir`. Error naming the key for a bad value (a
// reader that is not an address, an empty reader list). The Redis password comes from the
// environment variable TRELLIS_REDIS_PASSWORD when set, else from discovery.redis_password_file
// (mode 0600; Error when it is missing or others may read it).
ServerOptions server_options(const Config& config, const std::filesystem::path& run_dir);

class Server {
 public:
  explicit Server(ServerOptions options);  // opens the store
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, serves on threads of its own, writes <data_dir>/discovery.url; returns the port.
  int start();
  void stop();
  std::string url() const;
  const std::string& id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trellis::discovery
