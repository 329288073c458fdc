// The SHARDCAST client (specs/shardcast.md §4): what `trellis infer` and `trellis shardcast fetch`
// use to get a policy version from a set of relays. It reads every relay's manifest, trusts only
// version entries signed by the trainer's key, probes each relay once for a bandwidth estimate,
// downloads the shards from several relays at once (shard_fetcher.h), verifies the assembled file
// against the signed whole-file SHA-256 and only then renames it into place. Verified shards wait
// in a cache directory, so an interrupted fetch resumes. A version that cannot be completed is
// skipped for the next one when there is one: it would be stale by the time a retry finished.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "shardcast/manifest.h"
#include "shardcast/relay_selection.h"
#include "shardcast/shard_fetcher.h"

namespace trellis::shardcast {

struct ClientOptions {
  std::vector<std::string> relays;  // base URLs: http://host:port
  // The trainer's Ed25519 public key (hex). "" = signatures are not checked: only for
  // `trellis shardcast fetch --no-signature-check`; workers always set it.
  std::string trainer_public_key;
  std::filesystem::path cache_dir;  // verified shards of unfinished fetches
  RelayChoice choice = RelayChoice::Weighted;
  FetchOptions fetch;
  uint64_t seed = 0;                        // relay draws
  const std::atomic<bool>* stop = nullptr;  // when it becomes true, a fetch gives up

  // [shardcast] parallel, attempts_per_shard, version_timeout_s, stall_s, relay_choice.
  static ClientOptions from_config(const Config& config);
};

// Every server's manifest, fetched in parallel (so a stalled server costs one time-out, not one
// each); nullopt for a server that cannot be reached or answers something that is not a manifest.
std::vector<std::optional<Manifest>> fetch_manifests(const std::vector<std::string>& urls,
                                                     const HttpOptions& http);

// A verified version a client already holds: the base a delta applies to.
struct HeldVersion {
  int64_t version = -1;
  std::filesystem::path file;
};

struct FetchReport {
  int64_t version = 0;
  VersionEntry entry;  // the trainer-signed entry the file was verified against
  int64_t bytes = 0;   // downloaded: the delta's size, or the full file's
  int64_t full_bytes = 0;
  bool from_delta = false;  // made by applying the delta to the held version
  std::string delta_error;  // why the delta was tried and given up for the full version
  double seconds = 0;       // manifests, shards, assembly and verification
  FetchStats shards;
  std::vector<RelayStats> relays;
  std::string summary() const;  // one line for logs
};

class Client {
 public:
  explicit Client(ClientOptions options);

  // Every relay's manifest (nullopt for an unreachable relay, or one that answers garbage).
  std::vector<std::optional<Manifest>> manifests();
  // The newest version at most `max_version` that some relay lists under a valid signature.
  std::optional<int64_t> newest(int64_t max_version = INT64_MAX);
  // Downloads `version` to `out` (atomically), verified. When the deltas of the versions after
  // `held` up to `version` are listed and cost less than the full file, downloads them instead
  // and applies them in turn; when that fails (a delta cannot be completed, or a tensor of a
  // result does not match), the full version. Error naming the version when no relay lists it,
  // its signature is wrong, or it cannot be completed.
  FetchReport fetch(int64_t version, const std::filesystem::path& out,
                    const std::optional<HeldVersion>& held = std::nullopt);
  // Fetches the newest version in (above, max_version] to out_for(version); when it cannot be
  // completed and a newer one has appeared meanwhile, that one instead. nullopt when no relay
  // lists a version newer than `above`; Error when the newest cannot be fetched.
  std::optional<FetchReport> fetch_newest(
      int64_t above, int64_t max_version,
      const std::function<std::filesystem::path(int64_t)>& out_for,
      const std::optional<HeldVersion>& held = std::nullopt);

  const ClientOptions& options() const { return options_; }

 private:
  // The entry of `version` that verifies against the trainer's key.
  std::optional<VersionEntry> trusted_entry(const std::vector<std::optional<Manifest>>& manifests,
                                            int64_t version) const;
  void probe_once();
  // The trusted entries whose deltas lead from `held` to `entry`, oldest first (ending with
  // `entry`); empty when a link is missing or the deltas together cost the full file or more.
  std::vector<VersionEntry> delta_chain(const std::vector<std::optional<Manifest>>& manifests,
                                        const VersionEntry& entry, const HeldVersion& held) const;
  // Downloads `file` (of `entry`) and assembles it at `out`, verified; Error when it cannot be.
  FetchStats fetch_file(const ShardedFile& file, const VersionEntry& entry,
                        const std::vector<std::optional<Manifest>>& manifests,
                        const std::filesystem::path& out);

  ClientOptions options_;
  RelaySelector selector_;
  bool probed_ = false;
};

}  // namespace trellis::shardcast
