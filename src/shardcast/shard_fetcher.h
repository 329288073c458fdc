// Downloads the shards of one version into a directory, from several servers at once
// (specs/shardcast.md §4): `parallel` transfers in flight, each shard from a relay drawn by the
// RelaySelector, hashed as it streams in and renamed into place only when its SHA-256 matches the
// manifest. A corrupt shard is discarded and fetched again elsewhere (the relay is penalised); a
// shard a relay does not have yet (it is still pulling the version) is retried a moment later;
// each shard has a bounded number of failed attempts, and the version a deadline. Once every
// missing byte is being fetched, idle threads split the transfers with the most left and fetch
// their second halves from other relays (end game).
// Shards already in the directory that match their hash are kept (resume). Used by clients and
// by relays, which pull from their upstreams the same way.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shardcast/http_fetch.h"
#include "shardcast/manifest.h"
#include "shardcast/relay_selection.h"

namespace trellis::shardcast {

struct FetchOptions {
  int parallel = 8;            // shards in flight
  int attempts_per_shard = 6;  // failed downloads of one shard before the version is given up
  double version_timeout_s = 600;
  double retry_delay_s = 0.2;  // before asking again for a shard a relay does not have yet
  double manifest_refresh_s = 2;
  // Once every missing byte is being fetched, idle threads take the second half of the
  // transfers with the most left to another relay (HTTP byte ranges).
  bool endgame = true;
  HttpOptions http;
};

// What a server says of a version: not listed, listed while it is still pulling, or complete.
enum class Holding { None, Partial, Complete };

// What each server holds of `entry`'s full file or delta, from the manifests they list (nullopt:
// no answer). A server listing other hashes under this version number does not hold this version.
std::vector<Holding> holdings_of(const std::vector<std::optional<Manifest>>& manifests,
                                 const VersionEntry& entry, FileKind kind = FileKind::Full);

struct FetchStats {
  bool complete = false;
  std::string error;  // why not, when !complete
  int64_t shards_downloaded = 0, shards_reused = 0, bytes_downloaded = 0;
  int64_t failed_attempts = 0, corrupt_shards = 0, not_yet = 0;
  int64_t splits = 0;  // end-game splits: parts of running transfers taken to another relay
  double seconds = 0;
};

// Fetches every shard of `entry` (a version's full file or its delta) into `dir`. `initial` says,
// per server of `selector`, what it holds of this version; `holdings(http)` asks again, with `http`
// (which cancels the requests once the fetch is over), every manifest_refresh_s. `on_shard(i)` runs
// once shard i is in place: at the start for shards already there, then on the download thread that
// landed it. Stops early, incomplete, when `stop` becomes true.
FetchStats fetch_shards(const ShardedFile& entry, const std::filesystem::path& dir,
                        RelaySelector& selector, std::vector<Holding> initial,
                        const std::function<std::vector<Holding>(const HttpOptions&)>& holdings,
                        const FetchOptions& options,
                        const std::function<void(size_t)>& on_shard = {},
                        const std::atomic<bool>* stop = nullptr);

// Whether `path` holds exactly `shard` (size and SHA-256).
bool shard_file_matches(const std::filesystem::path& path, const ShardInfo& shard);

}  // namespace trellis::shardcast
