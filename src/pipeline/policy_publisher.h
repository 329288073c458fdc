// The trainer's side of SHARDCAST: each new policy version goes out through the origin
// (shardcast/origin.h) and the trainer's built-in origin server, which relays pull from. The
// weights are staged to disk synchronously (the next step changes them); sharding, hashing,
// signing and the announcement to the orchestrator happen on the origin's thread, so training
// never waits for a broadcast.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>

#include "common/config.h"
#include "common/identity.h"
#include "model/checkpoint.h"
#include "model/transformer.h"
#include "shardcast/origin.h"
#include "shardcast/shard_server.h"

namespace trellis::pipeline {

// What the newest published version cost to broadcast (the metrics' broadcast/*).
struct BroadcastStats {
  int64_t version = -1;  // -1: nothing published yet
  int64_t full_bytes = 0;
  int64_t bytes = 0;               // what a worker holding the version before downloads
  double unchanged_fraction = -1;  // of its elements; -1 without a delta
  int64_t changed_bytes = 0;       // the changed elements' own bytes (with a delta)
};

class PolicyPublisher {
 public:
  // [shardcast] origin_dir, origin_host/port, trainer_key_file, shard_size_mib, keep, deltas,
  // and rl.precision. Publishes the weights the engines use: in the trainer's compute dtype,
  // bf16 (`bf16`) or fp32, with the linear layers as FP8 codes and scales in FP8 modes. Starts the
  // origin server and writes its URL to <origin_dir>/origin.url. `stop` ends announcement retries.
  PolicyPublisher(const Config& config, const std::filesystem::path& run_dir,
                  const std::atomic<bool>& stop, bool bf16);
  ~PolicyPublisher();  // publishes what is queued, then stops the server

  // Stages `model`'s weights (in the dtype above; FP8 codes and scales, model/checkpoint.h, are
  // what the engines then use as they are) and queues them as `version`, with its delta against
  // the version before; once the manifest lists it, the orchestrator is told (POST
  // /trainer/version with the trainer's public key).
  void publish(int64_t version, const model::Transformer& model);
  // Unlists and deletes versions newer than `version` (a trainer resuming from a checkpoint).
  void remove_versions_after(int64_t version);
  void wait_idle();
  BroadcastStats last_broadcast() const;

  const std::string& public_key() const { return identity_.address(); }
  std::string origin_url() const { return server_->url(); }

 private:
  void announce(int64_t version);

  Identity identity_;
  std::filesystem::path origin_dir_, staging_dir_;
  std::string orchestrator_url_, trainer_token_;
  const std::atomic<bool>& stop_;
  model::StoreDtype store_dtype_;
  std::unique_ptr<shardcast::ShardServer> server_;
  std::unique_ptr<shardcast::Origin> origin_;
  mutable std::mutex mu_;
  BroadcastStats last_;  // guarded by mu_
};

}  // namespace trellis::pipeline
