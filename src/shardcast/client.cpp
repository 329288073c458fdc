#include "shardcast/client.h"

#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "shardcast/assembler.h"
#include "shardcast/weight_delta.h"

namespace trellis::shardcast {
namespace fs = std::filesystem;

ClientOptions ClientOptions::from_config(const Config& config) {
  ClientOptions o;
  o.fetch.parallel = static_cast<int>(config.get_at_least<int64_t>("shardcast.parallel", 1));
  o.fetch.attempts_per_shard =
      static_cast<int>(config.get_at_least<int64_t>("shardcast.attempts_per_shard", 1));
  o.fetch.version_timeout_s = config.get_at_least<double>("shardcast.version_timeout_s", 1);
  o.fetch.http.stall_s = config.get_at_least<double>("shardcast.stall_s", 1);
  o.choice = parse_relay_choice(config.get<std::string>("shardcast.relay_choice"),
                                "shardcast.relay_choice");
  return o;
}

std::string FetchReport::summary() const {
  std::string per_relay;
  for (const auto& r : relays)
    per_relay += fmt::format("{}{} {:.1f} MB/s sr {:.2f} ({} shards, {} failed)",
                             per_relay.empty() ? "" : "; ", r.url, r.bandwidth / 1e6, r.success,
                             r.downloads - r.failures, r.failures);
  const std::string how =
      from_delta            ? fmt::format(" (its delta: {:.1f}% of the full {} bytes)",
                                          100.0 * static_cast<double>(bytes) /
                                              static_cast<double>(std::max<int64_t>(full_bytes, 1)),
                                          full_bytes)
      : delta_error.empty() ? std::string()
                            : " (full version: its delta failed)";
  return fmt::format(
      "version {}: {} bytes{} in {:.2f} s ({:.1f} MB/s), {} shards downloaded, {} reused, {} "
      "failed attempts ({} corrupt), {} end-game splits; relays: {}",
      version, bytes, how, seconds, static_cast<double>(bytes) / std::max(seconds, 1e-9) / 1e6,
      shards.shards_downloaded, shards.shards_reused, shards.failed_attempts, shards.corrupt_shards,
      shards.splits, per_relay);
}

Client::Client(ClientOptions options)
    : options_(std::move(options)), selector_(options_.relays, options_.choice, options_.seed) {
  if (options_.relays.empty()) fail("shardcast.relay_urls", "no relay to fetch from");
  for (auto& url : options_.relays)
    while (!url.empty() && url.back() == '/') url.pop_back();
}

std::vector<std::optional<Manifest>> fetch_manifests(const std::vector<std::string>& urls,
                                                     const HttpOptions& options) {
  std::vector<std::optional<Manifest>> out(urls.size());
  HttpOptions http = options;
  http.timeout_s = std::min(http.timeout_s, 10.0);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < urls.size(); ++r) {
    threads.emplace_back([&, r] {
      const std::string url = urls[r] + "/" + kManifestFile;
      std::string body;
      const HttpResult res = http_get_string(url, http, body);
      if (!res.ok()) {
        log::debug("shardcast: {}: {}", url, res.error);
        return;
      }
      try {
        out[r] = parse_manifest(body, url);
      } catch (const Error& e) {
        log::warn("shardcast: ignoring a bad manifest: {}", e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<std::optional<Manifest>> Client::manifests() {
  return fetch_manifests(options_.relays, options_.fetch.http);
}

void Client::probe_once() {
  if (probed_) return;
  probed_ = true;
  HttpOptions http = options_.fetch.http;
  http.timeout_s = std::min(http.timeout_s, 30.0);
  std::vector<std::thread> threads;  // in parallel: each relay's own link is measured
  for (size_t r = 0; r < options_.relays.size(); ++r) {
    threads.emplace_back([&, r] {
      const HttpResult res = http_get(options_.relays[r] + "/" + kProbeFile, http,
                                      [](std::string_view) { return true; });
      selector_.seed(r, res.ok(), static_cast<double>(res.bytes) / std::max(res.seconds, 1e-6));
    });
  }
  for (auto& t : threads) t.join();
}

std::optional<VersionEntry> Client::trusted_entry(
    const std::vector<std::optional<Manifest>>& manifests, int64_t version) const {
  for (const auto& m : manifests) {
    const VersionEntry* e = m ? m->find(version) : nullptr;
    if (!e) continue;
    if (options_.trainer_public_key.empty() || e->signed_by(options_.trainer_public_key)) {
      VersionEntry trusted = *e;
      trusted.complete = true;
      return trusted;
    }
    log::warn("shardcast: version {} is listed with a signature that is not the trainer's",
              version);
  }
  return std::nullopt;
}

std::optional<int64_t> Client::newest(int64_t max_version) {
  const auto all = manifests();
  std::optional<int64_t> best;
  for (const auto& m : all) {
    if (!m) continue;
    for (const auto& v : m->versions)
      if (v.version <= max_version && (!best || v.version > *best) && trusted_entry(all, v.version))
        best = v.version;
  }
  return best;
}

FetchStats Client::fetch_file(const ShardedFile& file, const VersionEntry& entry,
                              const std::vector<std::optional<Manifest>>& manifests,
                              const fs::path& out) {
  const fs::path shard_dir = options_.cache_dir / version_dir_name(file.version);
  ShardAssembler assembler(file, shard_dir, out);
  const FetchStats st = fetch_shards(
      file, shard_dir, selector_, holdings_of(manifests, entry, file.kind),
      [&](const HttpOptions& http) {
        return holdings_of(fetch_manifests(options_.relays, http), entry, file.kind);
      },
      options_.fetch, [&](size_t i) { assembler.shard_ready(i); }, options_.stop);
  if (!st.complete) {
    fail(fmt::format("shardcast version {}{}", file.version,
                     file.kind == FileKind::Delta ? "'s delta" : ""),
         "cannot be completed: {}", st.error);
  }
  assembler.finish();
  return st;
}

std::vector<VersionEntry> Client::delta_chain(const std::vector<std::optional<Manifest>>& manifests,
                                              const VersionEntry& entry,
                                              const HeldVersion& held) const {
  std::error_code ec;
  if (!fs::exists(held.file, ec)) return {};
  std::vector<VersionEntry> chain = {entry};
  int64_t delta_bytes = 0;
  while (chain.back().delta && chain.back().delta->base > held.version) {
    delta_bytes += chain.back().delta->size;
    auto before = trusted_entry(manifests, chain.back().delta->base);
    if (!before) return {};
    chain.push_back(std::move(*before));
  }
  if (!chain.back().delta || chain.back().delta->base != held.version) return {};
  delta_bytes += chain.back().delta->size;
  if (delta_bytes >= entry.size) return {};  // the full version is cheaper
  return {chain.rbegin(), chain.rend()};
}

FetchReport Client::fetch(int64_t version, const fs::path& out,
                          const std::optional<HeldVersion>& held) {
  const double t0 = monotonic_seconds();
  const std::string where = fmt::format("shardcast version {}", version);
  auto all = manifests();
  const auto entry = trusted_entry(all, version);
  if (!entry) fail(where, "no relay lists this version under the trainer's signature");
  probe_once();
  FetchReport report;
  report.version = version;
  report.entry = *entry;
  report.full_bytes = entry->size;
  const auto chain = held ? delta_chain(all, *entry, *held) : std::vector<VersionEntry>{};
  if (!chain.empty()) {
    // Each delta in turn, the one before's result as its base; only the last lands at `out`.
    const fs::path dir = options_.cache_dir / version_dir_name(version);
    fs::path base = held->file;
    try {
      for (size_t i = 0; i < chain.size(); ++i) {
        const VersionEntry& e = chain[i];
        const fs::path delta = dir / fmt::format("delta_{}.bin", e.version);
        const fs::path result =
            i + 1 == chain.size() ? out : dir / fmt::format("v{}.bin", e.version);
        const FetchStats st = fetch_file(ShardedFile::delta_of(e), e, all, delta);
        apply_delta(FileWeights(base), delta, e.tensors, result,
                    fmt::format("shardcast version {}'s delta", e.version));
        report.shards.shards_downloaded += st.shards_downloaded;
        report.shards.shards_reused += st.shards_reused;
        report.shards.failed_attempts += st.failed_attempts;
        report.shards.corrupt_shards += st.corrupt_shards;
        report.bytes += e.delta->size;
        base = result;
      }
      report.shards.complete = true;
      report.from_delta = true;
    } catch (const Error& e) {
      report.delta_error = e.what();
      report.shards = {};
      report.bytes = 0;
      log::warn("shardcast: {}; fetching the full version", e.what());
    }
    std::error_code ec;
    for (const auto& e : chain) {
      fs::remove(dir / fmt::format("delta_{}.bin", e.version), ec);
      fs::remove(dir / fmt::format("v{}.bin", e.version), ec);
    }
  }
  if (!report.from_delta) {
    report.shards = fetch_file(*entry, *entry, all, out);
    report.bytes = entry->size;
  }
  report.relays = selector_.stats();
  // The cache holds only unfinished fetches: this one and older ones are done with.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.cache_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 1 && name[0] == 'v' &&
        std::all_of(name.begin() + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        std::stoll(name.substr(1)) <= version)
      fs::remove_all(e.path(), ec);
  }
  report.seconds = monotonic_seconds() - t0;
  return report;
}

std::optional<FetchReport> Client::fetch_newest(int64_t above, int64_t max_version,
                                                const std::function<fs::path(int64_t)>& out_for,
                                                const std::optional<HeldVersion>& held) {
  auto version = newest(max_version);
  while (version && *version > above) {
    try {
      return fetch(*version, out_for(*version), held);
    } catch (const Error& e) {
      const auto next = newest(max_version);
      if (!next || *next <= *version) throw;
      log::warn("shardcast: skipping to version {}: {}", *next, e.what());
      version = next;
    }
  }
  return std::nullopt;
}

}  // namespace trellis::shardcast
