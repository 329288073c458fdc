#include "shardcast/relay.h"

#include <chrono>
#include <cstdlib>
#include <random>

#include "common/clock.h"
#include "common/error.h"
#include "common/exception_message.h"
#include "common/files.h"
#include "common/http_service.h"
#include "common/json.h"
#include "common/logging.h"
#include "shardcast/assembler.h"
#include "shardcast/client.h"
#include "shardcast/nginx_config.h"
#include "shardcast/origin.h"
#include "shardcast/weight_delta.h"

namespace trellis::shardcast {
namespace fs = std::filesystem;

namespace {
constexpr size_t kMaxAllowlist = 1'000'000;  // addresses in one allowlist from the orchestrator

}  // namespace

RelaySettings RelaySettings::from_config(const Config& config, const fs::path& run_dir) {
  RelaySettings s;
  s.name = config.get<std::string>("relay.name");
  s.server.name = s.name;
  s.server.host = config.get<std::string>("relay.host");
  s.server.port = static_cast<int>(config.get_at_least<int64_t>("relay.port", 0));
  s.server.data_dir = config.get<std::string>("relay.data_dir");
  if (s.server.data_dir.empty()) s.server.data_dir = run_dir / "shardcast" / s.name;
  s.server.threads = static_cast<int>(config.get_at_least<int64_t>("relay.threads", 2));
  s.server.limits.requests_per_s = config.get_at_least<double>("relay.requests_per_s", 0);
  s.server.limits.burst = config.get_at_least<double>("relay.burst", 0);
  s.server.limits.bytes_per_s = config.get_at_least<double>("relay.bandwidth_mib_s", 0) * (1 << 20);
  s.server.allow = config.get_list<std::string>("relay.allow");
  for (size_t i = 0; i < s.server.allow.size(); ++i)
    check_allowlist_entry(s.server.allow[i], fmt::format("relay.allow[{}]", i));
  s.upstreams = config.get_list<std::string>("relay.upstreams");
  s.poll_s = config.get_at_least<double>("relay.poll_s", 0.05);
  s.keep = config.get_at_least<int64_t>("shardcast.keep", 1);
  s.pull.parallel = static_cast<int>(config.get_at_least<int64_t>("relay.pull_parallel", 1));
  s.pull.http.stall_s = config.get_at_least<double>("shardcast.stall_s", 1);
  s.pull.version_timeout_s = config.get_at_least<double>("shardcast.version_timeout_s", 1);
  s.allowlist_url = config.get<std::string>("relay.allowlist_url");
  s.allowlist_poll_s = config.get_at_least<double>("relay.allowlist_poll_s", 0.05);
  s.nginx_allowlist = config.get<std::string>("relay.nginx_allowlist");
  s.nginx_reload = config.get<std::string>("relay.nginx_reload");
  return s;
}

Relay::Relay(RelaySettings settings)
    : settings_(std::move(settings)),
      server_(settings_.server),
      upstreams_(settings_.upstreams, RelayChoice::Weighted, std::random_device{}()) {
  fs::create_directories(settings_.server.data_dir);
  ensure_probe_file(settings_.server.data_dir, int64_t{1} << 20);
  local_ = read_manifest(settings_.server.data_dir);  // a restarted relay resumes its versions
  // With an upstream, what is here is re-checked by the first pull; without, served as it is.
  for (auto& v : local_.versions) {
    v.complete = settings_.upstreams.empty();
    v.delta_complete = settings_.upstreams.empty() || !v.delta;
  }
  write_local(local_);
}

Relay::~Relay() { stop(); }

int Relay::start() {
  const int port = server_.start();
  write_file_atomic(settings_.server.data_dir / "relay.url", server_.url() + "\n");
  log::info("relay {}: serving {} on {}, pulling from {}", settings_.name,
            settings_.server.data_dir.string(), server_.url(),
            settings_.upstreams.empty() ? "nowhere (a static directory)"
                                        : fmt::format("{}", fmt::join(settings_.upstreams, ", ")));
  server_.set_extra_metrics([this] { return extra_metrics(); });
  if (!settings_.upstreams.empty()) puller_ = std::thread([this] { pull_loop(); });
  if (!settings_.allowlist_url.empty()) {
    server_.access().set_dynamic({});  // nobody but static entries until the first answer
    allowlister_ = std::thread([this] { allowlist_loop(); });
  }
  return port;
}

void Relay::stop() {
  stopping_ = true;
  cv_.notify_all();
  if (puller_.joinable()) puller_.join();
  if (allowlister_.joinable()) allowlister_.join();
  server_.stop();
}

void Relay::write_local(const Manifest& m) {
  write_manifest(settings_.server.data_dir, m);
  std::lock_guard lock(mu_);
  held_.clear();
  for (const VersionEntry& v : m.versions)
    if (v.complete) held_.push_back(v.version);
}

void Relay::pull_loop() {
  while (!stopping_) {
    try {
      pull_once();
    } catch (const std::exception& e) {
      log::warn("relay {}: {}", settings_.name, message_of(e));
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(settings_.poll_s),
                 [&] { return stopping_.load(); });
  }
}

void Relay::pull_once() {
  const auto upstream = fetch_manifests(settings_.upstreams, settings_.pull.http);
  Manifest merged;
  bool reachable = false;
  for (const auto& m : upstream) {
    if (!m) continue;
    reachable = true;
    for (const auto& v : m->versions)
      if (!merged.find(v.version)) merged.put(v);
  }
  if (!reachable) return;  // keep serving what we have
  while (static_cast<int64_t>(merged.versions.size()) > settings_.keep)
    merged.versions.erase(merged.versions.begin());

  // Unlist what upstream no longer has (or replaced), then delete it.
  std::vector<int64_t> gone;
  for (const auto& v : local_.versions) {
    const VersionEntry* up = merged.find(v.version);
    if (!up || up->signing_message() != v.signing_message()) gone.push_back(v.version);
  }
  // List new versions at once, before pulling them: clients may start on their shards.
  bool listed = !gone.empty();
  for (int64_t v : gone) local_.erase(v);
  for (const auto& v : merged.versions) {
    if (local_.find(v.version)) continue;
    VersionEntry entry = v;
    entry.complete = false;
    entry.delta_complete = !entry.delta;
    local_.put(std::move(entry));
    listed = true;
  }
  if (listed) write_local(local_);
  for (int64_t v : gone) fs::remove_all(settings_.server.data_dir / version_dir_name(v));

  // Pull, oldest first: each version's delta then applies to the one before it.
  for (auto& entry : local_.versions) {
    if (stopping_) break;
    if (!entry.complete || !entry.delta_complete) pull_version(entry, upstream);
  }
}

void Relay::pull_version(VersionEntry& entry,
                         const std::vector<std::optional<Manifest>>& upstream) {
  const fs::path dir = settings_.server.data_dir / version_dir_name(entry.version);
  auto pull = [&](const ShardedFile& file) {
    const FetchStats st = fetch_shards(
        file, dir, upstreams_, holdings_of(upstream, entry, file.kind),
        [&](const HttpOptions& http) {
          return holdings_of(fetch_manifests(settings_.upstreams, http), entry, file.kind);
        },
        settings_.pull, {}, &stopping_);
    shards_pulled_ += st.shards_downloaded;
    if (!st.complete) {
      ++pull_failures_;
      if (!stopping_)
        log::warn("relay {}: version {}{} not complete yet: {}", settings_.name, entry.version,
                  file.kind == FileKind::Delta ? "'s delta" : "", st.error);
    }
    return st;
  };
  const double t0 = monotonic_seconds();
  // The delta first: it is small, and the workers holding the base want nothing else.
  if (entry.delta && !entry.delta_complete && pull(ShardedFile::delta_of(entry)).complete) {
    entry.delta_complete = true;
    write_local(local_);
  }
  if (entry.complete) return;
  bool made = false;
  const VersionEntry* base = entry.delta ? local_.find(entry.delta->base) : nullptr;
  if (entry.delta_complete && base && base->complete) {
    try {
      materialize(entry, *base);
      made = true;
      ++versions_from_delta_;
    } catch (const std::exception& e) {
      log::warn("relay {}: version {} from its delta failed, pulling the full version: {}",
                settings_.name, entry.version, message_of(e));
    }
  }
  if (!made) {
    const FetchStats st = pull(entry);
    if (!st.complete) return;
  }
  entry.complete = true;
  write_local(local_);
  ++versions_pulled_;
  log::info("relay {}: version {} complete in {:.2f} s ({})", settings_.name, entry.version,
            monotonic_seconds() - t0, made ? "applied its delta" : "full version pulled");
}

void Relay::materialize(const VersionEntry& entry, const VersionEntry& base) {
  const fs::path dir = settings_.server.data_dir / version_dir_name(entry.version);
  const fs::path delta = dir / "delta.partial";
  struct Cleanup {
    fs::path path;
    ~Cleanup() {
      std::error_code ec;
      fs::remove(path, ec);
    }
  } cleanup{delta};
  ShardAssembler assembled(ShardedFile::delta_of(entry), dir, delta);
  assembled.finish();
  const MappedFile delta_bytes(delta);
  // The shards are written straight from the delta and committed only when every tensor matched
  // its signed hash; the tensors cover the file, so they are then the trainer's shards.
  ShardSink shards(dir, entry.size, entry.shard_size, FileKind::Full);
  apply_delta(ShardWeights(settings_.server.data_dir / version_dir_name(base.version), base),
              std::string_view(reinterpret_cast<const char*>(delta_bytes.bytes().data()),
                               delta_bytes.bytes().size()),
              entry.tensors, shards,
              fmt::format("relay {}: version {}'s delta", settings_.name, entry.version));
}

std::string Relay::extra_metrics() const {
  return fmt::format(
      "# HELP trellis_relay_versions_pulled_total versions pulled complete from upstream\n"
      "# TYPE trellis_relay_versions_pulled_total counter\n"
      "trellis_relay_versions_pulled_total {}\n"
      "# HELP trellis_relay_shards_pulled_total shards pulled and verified\n"
      "# TYPE trellis_relay_shards_pulled_total counter\n"
      "trellis_relay_shards_pulled_total {}\n"
      "# HELP trellis_relay_pull_failures_total pulls of a version that did not complete\n"
      "# TYPE trellis_relay_pull_failures_total counter\n"
      "trellis_relay_pull_failures_total {}\n"
      "# HELP trellis_relay_versions_from_delta_total versions made here from their delta\n"
      "# TYPE trellis_relay_versions_from_delta_total counter\n"
      "trellis_relay_versions_from_delta_total {}\n",
      versions_pulled_.load(), shards_pulled_.load(), pull_failures_.load(),
      versions_from_delta_.load());
}

void Relay::allowlist_loop() {
  while (!stopping_) {
    refresh_allowlist();
    report_versions();
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(settings_.allowlist_poll_s),
                 [&] { return stopping_.load(); });
  }
}

void Relay::report_versions() {
  Json versions;
  {
    std::lock_guard lock(mu_);
    versions = held_;
  }
  const Json body = {{"name", settings_.name},
                     {"url", url()},
                     {"versions", versions},
                     {"versions_pulled", versions_pulled_.load()},
                     {"shards_pulled", shards_pulled_.load()},
                     {"pull_failures", pull_failures_.load()}};
  httplib::Client c = http_client(settings_.allowlist_url, 5);
  c.set_bearer_token_auth(settings_.allowlist_token);
  const auto res = c.Post("/relays", body.dump(), "application/json");
  // The dashboard's only: an orchestrator that does not answer is the allowlist poll's to report.
  if (res && res->status != 200) {
    log::warn("relay {}: the orchestrator refused its report (HTTP {}): {}", settings_.name,
              res->status, res->body.substr(0, 200));
  }
}

void Relay::refresh_allowlist() {
  const std::string url = settings_.allowlist_url + "/allowlist";
  std::string body;
  HttpOptions http;
  http.timeout_s = 5;
  http.bearer_token = settings_.allowlist_token;
  const HttpResult r = http_get_string(url, http, body);
  try {
    if (!r.ok()) fail(url, "{}", r.error);
    const Json j = parse_json(body, url);
    const auto revision = json_required<int64_t>(j, "revision", url);
    const auto ips = json_required<std::vector<std::string>>(j, "ips", url);
    // Each entry becomes an nginx `allow` line: only plain addresses pass ("all", a network or
    // an injected directive would open the relay to everyone).
    if (ips.size() > kMaxAllowlist) {
      fail(url, "{} addresses; a relay takes at most {}", ips.size(), kMaxAllowlist);
    }
    for (size_t i = 0; i < ips.size(); ++i) {
      if (!is_ip_address(ips[i])) {
        fail(url, "ips[{}] = '{}' is not an IP address", i, ips[i].substr(0, 100));
      }
    }
    // Compared by content: a replaced orchestrator starts its revisions again.
    if (allowlist_ && *allowlist_ == ips) return;
    server_.access().set_dynamic(ips);
    if (!settings_.nginx_allowlist.empty()) {
      write_file_atomic(settings_.nginx_allowlist, nginx_allowlist(settings_.server.allow, ips));
      if (!settings_.nginx_reload.empty() && std::system(settings_.nginx_reload.c_str()) != 0)
        log::warn("relay {}: '{}' failed", settings_.name, settings_.nginx_reload);
    }
    allowlist_ = ips;
    log::info("relay {}: allowlist revision {}: {} node addresses", settings_.name, revision,
              ips.size());
  } catch (const Error& e) {
    log::warn("relay {}: cannot refresh the allowlist, keeping the last one: {}", settings_.name,
              e.what());
  }
}

}  // namespace trellis::shardcast
