#include "validator/policy_cache.h"

#include "common/error.h"
#include "common/logging.h"
#include "model/checkpoint.h"

namespace trellis::validator {
namespace fs = std::filesystem;

PolicyCache::PolicyCache(const Config& config, fs::path dir, fs::path base_model,
                         const model::Compute& compute, const std::atomic<bool>& stop)
    : config_(config),
      dir_(std::move(dir)),
      base_model_(std::move(base_model)),
      compute_(compute),
      stop_(stop) {
  if (config.get_list<std::string>("shardcast.relay_urls").empty())
    fail("shardcast.relay_urls", "no relay to fetch policies from: list the relays' URLs");
}

void PolicyCache::set_trainer_key(const std::string& key) {
  if (key == trainer_key_ && client_) return;
  auto o = shardcast::ClientOptions::from_config(config_);
  o.relays = config_.get_list<std::string>("shardcast.relay_urls");
  o.trainer_public_key = trainer_key_ = key;
  o.cache_dir = dir_ / "shards";
  o.stop = &stop_;
  client_ = std::make_unique<shardcast::Client>(std::move(o));
}

model::Transformer& PolicyCache::model(int64_t version) {
  if (auto it = models_.find(version); it != models_.end()) return *it->second;
  if (!client_) fail("policy cache", "the trainer's public key is not known yet");
  const fs::path dir = dir_ / ("step_" + std::to_string(version));
  if (!fs::exists(dir / "model.safetensors")) {
    fs::create_directories(dir);
    fs::copy_file(base_model_ / "config.json", dir / "config.json",
                  fs::copy_options::overwrite_existing);
    // Validators check versions in order: the one before is usually here for the delta.
    const fs::path before = dir_ / ("step_" + std::to_string(version - 1)) / "model.safetensors";
    std::optional<shardcast::HeldVersion> held;
    if (fs::exists(before)) held = shardcast::HeldVersion{version - 1, before};
    const auto report = client_->fetch(version, dir / "model.safetensors", held);
    log::info("fetched policy {}", report.summary());
  }
  auto loaded = model::load_transformer(dir, compute_);
  return *(models_[version] = std::move(loaded));
}

void PolicyCache::release_older_than(int64_t oldest) {
  for (auto it = models_.begin(); it != models_.end() && it->first < oldest;) {
    std::error_code ec;
    fs::remove_all(dir_ / ("step_" + std::to_string(it->first)), ec);
    it = models_.erase(it);
  }
}

}  // namespace trellis::validator
