#include "pipeline/policy_publisher.h"

#include <chrono>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "common/logging.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"
#include "rl/precision.h"

namespace trellis::pipeline {
namespace fs = std::filesystem;

PolicyPublisher::PolicyPublisher(const Config& config, const fs::path& run_dir,
                                 const std::atomic<bool>& stop, bool bf16)
    : identity_([&] {
        fs::path key = config.get<std::string>("shardcast.trainer_key_file");
        if (key.empty()) key = run_dir / "keys" / "trainer.key";
        return Identity::load_or_create(key);
      }()),
      orchestrator_url_(orchestrator::client_url(config)),
      trainer_token_(orchestrator::client_token(config, run_dir, orchestrator::Role::kTrainer)),
      stop_(stop) {
  origin_dir_ = config.get<std::string>("shardcast.origin_dir");
  if (origin_dir_.empty()) origin_dir_ = run_dir / "shardcast" / "origin";
  staging_dir_ = origin_dir_.parent_path() / "origin-staging";
  fs::remove_all(staging_dir_);
  shardcast::PublishOptions publish;
  publish.shard_size = std::max<int64_t>(
      1, static_cast<int64_t>(config.get<double>("shardcast.shard_size_mib") * (1 << 20)));
  publish.keep = config.get_at_least<int64_t>("shardcast.keep", 1);
  publish.deltas = config.get<bool>("shardcast.deltas");
  if (rl::Precision::from_config(config).rollout_fp8)
    store_dtype_ = bf16 ? model::StoreDtype::FP8_BF16 : model::StoreDtype::FP8;
  else
    store_dtype_ = bf16 ? model::StoreDtype::BF16 : model::StoreDtype::F32;
  origin_ = std::make_unique<shardcast::Origin>(origin_dir_, identity_, publish);
  shardcast::ServerOptions server;
  server.host = config.get<std::string>("shardcast.origin_host");
  server.port = static_cast<int>(config.get_at_least<int64_t>("shardcast.origin_port", 0));
  server.data_dir = origin_dir_;
  server.name = "origin";
  server_ = std::make_unique<shardcast::ShardServer>(server);
  server_->start();
  write_file_atomic(origin_dir_ / "origin.url", server_->url() + "\n");
  log::info("shardcast origin {} serving {}; manifests signed by {}", server_->url(),
            origin_dir_.string(), identity_.address());
}

PolicyPublisher::~PolicyPublisher() {
  origin_.reset();  // finishes the queue
  server_->stop();
  fs::remove(origin_dir_ / "origin.url");
}

void PolicyPublisher::publish(int64_t version, const model::Transformer& model) {
  const fs::path dir = staging_dir_ / ("v" + std::to_string(version));
  model::save_transformer(model, dir, store_dtype_, UINT64_MAX);
  origin_->publish(version, version, dir / "model.safetensors",
                   [this, dir](const shardcast::VersionEntry& entry) {
                     fs::remove_all(dir);
                     {
                       std::lock_guard lock(mu_);
                       last_ = {entry.version, entry.size, entry.size, -1, 0};
                       if (entry.delta) {
                         last_.bytes = entry.delta->size;
                         last_.unchanged_fraction =
                             1.0 -
                             static_cast<double>(entry.delta->changed_elements) /
                                 static_cast<double>(std::max<int64_t>(entry.delta->elements, 1));
                         last_.changed_bytes = entry.delta->changed_bytes;
                       }
                     }
                     announce(entry.version);
                   });
}

BroadcastStats PolicyPublisher::last_broadcast() const {
  std::lock_guard lock(mu_);
  return last_;
}

void PolicyPublisher::announce(int64_t version) {
  orchestrator::Client client(orchestrator_url_, trainer_token_);
  while (!stop_) {
    try {
      client.publish_version(version, identity_.address());
      return;
    } catch (const Error& e) {
      log::warn("{}; retrying", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
}

void PolicyPublisher::remove_versions_after(int64_t version) {
  origin_->wait_idle();
  shardcast::remove_versions_after(origin_dir_, version);
}

void PolicyPublisher::wait_idle() { origin_->wait_idle(); }

}  // namespace trellis::pipeline
