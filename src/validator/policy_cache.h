// The policy versions a validator recomputes with: each version a submission claims is fetched
// once through SHARDCAST (the relays, verified against the trainer's signed manifest, exactly as
// workers fetch it), loaded, and kept while it can still be claimed. Versions below the oldest one
// still inside the async window are dropped from memory and disk.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "common/config.h"
#include "model/compute.h"
#include "model/transformer.h"
#include "shardcast/client.h"

namespace trellis::validator {

class PolicyCache {
 public:
  // [shardcast] relay_urls and client settings; versions go to `dir`/step_<v>/ (config.json from
  // `base_model`, model.safetensors fetched). `stop` abandons a fetch in progress.
  PolicyCache(const Config& config, std::filesystem::path dir, std::filesystem::path base_model,
              const model::Compute& compute, const std::atomic<bool>& stop);

  // The trainer's public key (hex) that signs the manifests; set before model() (and again when
  // the orchestrator reports another).
  void set_trainer_key(const std::string& key);
  // Version `version`, fetched and loaded when not held. Error naming the version when no relay
  // can deliver it.
  model::Transformer& model(int64_t version);
  // Forgets versions below `oldest` (no submission can claim them any more).
  void release_older_than(int64_t oldest);

 private:
  const Config& config_;
  std::filesystem::path dir_, base_model_;
  model::Compute compute_;
  const std::atomic<bool>& stop_;
  std::string trainer_key_;
  std::unique_ptr<shardcast::Client> client_;
  std::map<int64_t, std::unique_ptr<model::Transformer>> models_;
};

}  // namespace trellis::validator
