// The worker's side of SHARDCAST: a background thread that keeps the newest policy version the
// orchestrator has announced on local disk, fetched from the relays (shardcast/client.h) and
// verified against the trainer's signed manifest, while the worker goes on generating with the
// version it holds. Only verified files ever appear as a version here: the worker never loads
// weights that failed verification. Before its first fetch the worker registers with the
// orchestrator, whose list of active nodes is the relays' allowlist, and it stays registered from
// a thread of its own (orchestrator/registration_keeper.h), however long a download takes.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "common/config.h"
#include "common/identity.h"
#include "orchestrator/registration_keeper.h"
#include "shardcast/client.h"

namespace trellis::pipeline {

class PolicyFetcher {
 public:
  // [shardcast] relay_urls and client settings; versions go to `dir`/step_<v>/ (a model directory:
  // config.json from `base_model`, model.safetensors fetched).
  PolicyFetcher(const Config& config, std::filesystem::path dir, std::filesystem::path base_model,
                const Identity& identity, const std::atomic<bool>& stop);
  ~PolicyFetcher();  // abandons a fetch in progress

  // The newest fetched version newer than `held`, and its model directory.
  std::optional<std::pair<int64_t, std::filesystem::path>> newer_than(int64_t held);
  // Deletes fetched versions older than `version` (the worker holds `version` now).
  void release_older_than(int64_t version);

 private:
  void loop();
  void fetch_once();
  // The newest version in `dir_` up to `max_version` whose weights match the trainer's signed
  // entry kept beside them (a worker restarted by its node agent loads them without a download);
  // a copy that does not match is deleted.
  std::optional<int64_t> newest_cached(int64_t max_version);

  const Config& config_;
  std::filesystem::path dir_, base_model_;
  const Identity& identity_;
  const std::atomic<bool>& stop_;
  std::atomic<bool> stopping_{false};  // stop_, or this fetcher destroyed
  std::string orchestrator_url_;
  double poll_s_ = 0.5;
  std::string trainer_key_;
  bool cache_checked_ = false;  // newest_cached() runs once, when the trainer's key is known
  std::unique_ptr<shardcast::Client> client_;  // once the trainer's key is known
  std::mutex mu_;
  int64_t fetched_ = -1;  // guarded by mu_
  double last_warning_ = -1e9;
  orchestrator::RegistrationKeeper registration_;
  std::thread thread_;
};

}  // namespace trellis::pipeline
