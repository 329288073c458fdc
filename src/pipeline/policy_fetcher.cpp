#include "pipeline/policy_fetcher.h"

#include <algorithm>
#include <chrono>

#include "common/clock.h"
#include "common/error.h"
#include "common/exception_message.h"
#include "common/logging.h"
#include "orchestrator/client.h"
#include "shardcast/shard_fetcher.h"

namespace trellis::pipeline {
namespace fs = std::filesystem;
namespace {

fs::path version_dir(const fs::path& dir, int64_t version) {
  return dir / ("step_" + std::to_string(version));
}

// The versions held in `dir` (its step_<v> folders).
std::vector<int64_t> cached_versions(const fs::path& dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 5 && name.size() < 16 && name.rfind("step_", 0) == 0 &&
        name.find_first_not_of("0123456789", 5) == std::string::npos) {
      out.push_back(std::stoll(name.substr(5)));
    }
  }
  return out;
}

}  // namespace

PolicyFetcher::PolicyFetcher(const Config& config, fs::path dir, fs::path base_model,
                             const Identity& identity, const std::atomic<bool>& stop)
    : config_(config),
      dir_(std::move(dir)),
      base_model_(std::move(base_model)),
      identity_(identity),
      stop_(stop),
      orchestrator_url_(orchestrator::client_url(config)),
      registration_(orchestrator_url_, "", identity, stop) {
  poll_s_ = config.get_at_least<double>("infer.poll_s", 0.01);
  if (config.get_list<std::string>("shardcast.relay_urls").empty())
    fail("shardcast.relay_urls", "no relay to fetch policies from: list the relays' URLs");
  thread_ = std::thread([this] { loop(); });
}

PolicyFetcher::~PolicyFetcher() {
  stopping_ = true;
  thread_.join();
}

std::optional<std::pair<int64_t, fs::path>> PolicyFetcher::newer_than(int64_t held) {
  std::lock_guard lock(mu_);
  if (fetched_ <= held) return std::nullopt;
  return std::make_pair(fetched_, version_dir(dir_, fetched_));
}

void PolicyFetcher::release_older_than(int64_t version) {
  std::error_code ec;
  for (const int64_t v : cached_versions(dir_))
    if (v < version) fs::remove_all(version_dir(dir_, v), ec);
}

std::optional<int64_t> PolicyFetcher::newest_cached(int64_t max_version) {
  std::vector<int64_t> versions = cached_versions(dir_);
  std::sort(versions.rbegin(), versions.rend());
  std::error_code ec;
  for (const int64_t v : versions) {
    if (v > max_version) continue;
    const fs::path dir = version_dir(dir_, v);
    try {
      const shardcast::Manifest m = shardcast::read_manifest(dir);
      const shardcast::VersionEntry* entry = m.find(v);
      if (!entry || !entry->signed_by(trainer_key_))
        fail(dir.string(), "not signed by this run's trainer ({})", trainer_key_);
      const fs::path weights = dir / "model.safetensors";
      if (!shardcast::shard_file_matches(weights, {entry->size, entry->sha256}))
        fail(weights.string(), "does not match the trainer's signed size and hash");
      log::info(
          "policy version {} loaded from the weights cache {} (trainer's signature and hash "
          "verified)",
          v, dir.string());
      return v;
    } catch (const std::exception& e) {
      log::warn("weights cache: dropping version {}: {}", v, message_of(e));
      fs::remove_all(dir, ec);
    }
  }
  return std::nullopt;
}

void PolicyFetcher::loop() {
  while (!stop_ && !stopping_) {
    try {
      fetch_once();
    } catch (const std::exception& e) {
      if (monotonic_seconds() - last_warning_ > 10) {
        log::warn("policy fetch: {}", message_of(e));
        last_warning_ = monotonic_seconds();
      }
    }
    for (double slept = 0; slept < poll_s_ && !stop_ && !stopping_; slept += 0.05)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void PolicyFetcher::fetch_once() {
  orchestrator::Client orchestrator(orchestrator_url_);
  // The relays serve only nodes the orchestrator lists, from the IP it saw them register from:
  // registering again now and then (registration_) follows a node whose address changed, and is
  // how a worker without a node agent stays live (orchestrator.registration_ttl_s).
  if (!registration_.registered()) return;
  const auto status = orchestrator.status();
  if (status.trainer_public_key.empty()) return;  // nothing published yet: nothing to verify
  if (!client_ || trainer_key_ != status.trainer_public_key) {
    auto o = shardcast::ClientOptions::from_config(config_);
    o.relays = config_.get_list<std::string>("shardcast.relay_urls");
    o.trainer_public_key = trainer_key_ = status.trainer_public_key;
    o.cache_dir = dir_ / "shards";
    o.seed = std::hash<std::string>{}(identity_.address());
    o.stop = &stopping_;
    client_ = std::make_unique<shardcast::Client>(std::move(o));
  }
  int64_t above;
  {
    std::lock_guard lock(mu_);
    above = fetched_;
  }
  if (!cache_checked_) {
    cache_checked_ = true;
    if (const auto cached = newest_cached(status.policy_version)) {
      std::lock_guard lock(mu_);
      fetched_ = above = *cached;
    }
  }
  if (status.policy_version <= above) return;
  // The version held is the base its successor's delta applies to.
  std::optional<shardcast::HeldVersion> held;
  if (above >= 0)
    held = shardcast::HeldVersion{above, version_dir(dir_, above) / "model.safetensors"};
  const auto report = client_->fetch_newest(
      above, status.policy_version,
      [&](int64_t v) {
        const fs::path dir = version_dir(dir_, v);
        fs::create_directories(dir);
        fs::copy_file(base_model_ / "config.json", dir / "config.json",
                      fs::copy_options::overwrite_existing);
        return dir / "model.safetensors";
      },
      held);
  if (!report) return;
  // What the version was verified against, so that a restart can trust the cached copy.
  shardcast::Manifest signed_entry;
  signed_entry.put(report->entry);
  shardcast::write_manifest(version_dir(dir_, report->version), signed_entry);
  log::info("fetched policy {}", report->summary());
  std::lock_guard lock(mu_);
  fetched_ = report->version;
}

}  // namespace trellis::pipeline
