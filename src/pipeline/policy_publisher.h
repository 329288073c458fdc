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

#include "common/config.h"
#include "common/identity.h"
#include "model/checkpoint.h"
#include "model/transformer.h"
#include "shardcast/origin.h"
#include "shardcast/shard_server.h"

namespace trellis::pipeline {

class PolicyPublisher {
 public:
  // [shardcast] origin_dir, origin_host/port, trainer_key_file, shard_size_mib, keep, and
  // rl.precision. Starts the origin server and writes its URL to <origin_dir>/origin.url. `stop`
  // ends announcement retries.
  PolicyPublisher(const Config& config, const std::filesystem::path& run_dir,
                  const std::atomic<bool>& stop);
  ~PolicyPublisher();  // publishes what is queued, then stops the server

  // Stages `model`'s weights (fp32; in an FP8 run the decoder's linear weights as FP8 codes and
  // scales, model/checkpoint.h, what the engines then use as they are) and queues them as
  // `version`; once the manifest lists it, the orchestrator is told (POST /trainer/version with
  // the trainer's public key).
  void publish(int64_t version, const model::Transformer& model);
  // Unlists and deletes versions newer than `version` (a trainer resuming from a checkpoint).
  void remove_versions_after(int64_t version);
  void wait_idle();

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
};

}  // namespace trellis::pipeline
