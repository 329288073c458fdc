// The orchestrator's HTTP API (the client side is client.h): the step counter, upload URLs,
// uploads and their checks, the accepted files of each step, and the trainer's published policy
// version. State lives in <data_dir>/orchestrator.sqlite (state.h) and accepted files in
// <data_dir>/rollouts/ (rollout/store.h), so a restarted server carries on where it stopped.
//
//   GET  /healthz                       200 "ok"
//   GET  /metrics                       Prometheus text
//   GET  /status                        run id, step counter, policy version, run shape, counts
//   POST /submissions                   {node_address, step, submission, sha256, size} ->
//                                       {upload_url, expires}; 400 malformed, 409 refused
//   PUT  /upload/step_<s>/<node>-<sub>.parquet?expires=&sig=
//                                       the file: 200 {status, samples, signal_samples};
//                                       403 bad or expired URL, 409 nothing pending, 422 rejected
//   GET  /steps/<s>/accepted            {step, files: [...] in acceptance order, signal_samples}
//   GET  /rollouts/step_<s>/<name>      the bytes of an accepted file; 404 otherwise
//   POST /trainer/version               {version} (bearer trainer_token when configured)
//
// Every error is JSON {"error": "..."} naming what was wrong; no request can crash the server.
// docs/orchestrator.md describes each endpoint's checks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "common/config.h"

namespace trellis::orchestrator {

struct ApiOptions {
  std::string host = "127.0.0.1";
  int port = 8400;                 // 0 = any free port
  std::string url;                 // what orchestrator.url says; "" = http://<host>:<port>
  std::filesystem::path data_dir;  // orchestrator.sqlite, orchestrator.url, rollouts/
  std::string run_id;              // recorded on the first start; later starts keep the stored one
  int64_t steps = 50, batch_size = 64, group_size = 8, async_level = 2;  // [rl]
  int64_t url_ttl_s = 600;
  int64_t max_upload_bytes = int64_t{256} << 20;
  std::string trainer_token;  // "" = POST /trainer/version is open
  int http_threads = 16;
};

// [orchestrator] and [rl] of `config`; data_dir "" means `run_dir`, and the run ID is the run
// directory's name. Error naming the key for a value out of range.
ApiOptions api_options(const Config& config, const std::filesystem::path& run_dir);

class Server {
 public:
  // Opens the state database (Error naming it when it cannot).
  explicit Server(ApiOptions options);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port, serves on threads of its own, then writes the URL to
  // <data_dir>/orchestrator.url atomically; returns the port. Error naming the address when it
  // cannot bind.
  int start();
  // Stops accepting requests, finishes those in flight and removes orchestrator.url. Idempotent.
  void stop();
  int port() const;
  std::string url() const;  // as written to orchestrator.url
  const std::string& run_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trellis::orchestrator
