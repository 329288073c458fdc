// SHARDCAST from the command line (src/shardcast):
//   trellis relay [CONFIG...] [--set relay.key=v ...]   a relay: pull from upstream, serve
//   trellis relay nginx-config [CONFIG...] --out DIR    nginx.conf + allowlist.conf for the same
//   trellis shardcast publish FILE --data-dir D         publish a file as a signed version
//   trellis shardcast fetch --relays URL[,URL...] --out FILE   fetch and verify a version
//                          [--base FILE --base-version N]      ... by its delta when it has one
#include <chrono>
#include <iostream>
#include <memory>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/stop_signal.h"
#include "common/error.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/run_dir.h"
#include "orchestrator/credentials.h"
#include "shardcast/client.h"
#include "shardcast/nginx_config.h"
#include "shardcast/origin.h"
#include "shardcast/relay.h"

namespace trellis::cli {
namespace fs = std::filesystem;
namespace {

void add_relay_command(CLI::App& app) {
  static RunFlags flags;
  static std::string nginx_out;
  auto* cmd = app.add_subcommand(
      "relay", "Serve checkpoint versions to workers, pulling them from the origin or a relay");
  cmd->add_option("config", flags.configs, "TOML configuration files, applied left to right")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", flags.overrides, "override one key: section.key=value (repeatable)");
  cmd->add_option("--run-dir", flags.run_dir,
                  "run directory (default data_dir: <run dir>/shardcast/<relay.name>)");
  auto* nginx = cmd->add_subcommand(
      "nginx-config",
      "Write nginx.conf and allowlist.conf serving this relay's data_dir with its limits");
  nginx->add_option("--out", nginx_out, "directory for nginx.conf, allowlist.conf, logs")
      ->required();
  nginx->fallthrough();  // CONFIG and --set may follow the subcommand
  nginx->callback([nginx] {
    const Config config = flags.resolve();
    fs::path run_dir = config.get<std::string>("run.dir");
    if (run_dir.empty()) run_dir = fs::current_path();
    const auto settings = shardcast::RelaySettings::from_config(config, run_dir);
    const fs::path conf = shardcast::write_nginx_config(settings, nginx_out);
    std::cout << "wrote " << conf.string() << " serving " << settings.server.data_dir.string()
              << " on " << settings.server.host << ":" << settings.server.port << "\nrun: nginx -p "
              << fs::absolute(nginx_out).string() << " -c " << conf.string() << "\n";
  });
  cmd->callback([cmd, nginx] {
    if (nginx->parsed()) return;
    const auto& stop = stop_requested();
    const Config config = flags.resolve();
    const auto run_dir = join_run_dir(config);
    auto settings = shardcast::RelaySettings::from_config(config, run_dir);
    if (!settings.allowlist_url.empty()) {  // the pool's IPs are for relays only
      settings.allowlist_token =
          orchestrator::client_token(config, run_dir, orchestrator::Role::kRelay);
    }
    shardcast::Relay relay(settings);
    relay.start();
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    log::info("relay: stop signal received, shutting down");
    relay.stop();
  });
}

void add_publish_command(CLI::App* shardcast) {
  struct Args {
    std::string file, data_dir, key;
    int64_t version = -1, step = -1, keep = 5;
    double shard_size_mib = 50;
    bool no_delta = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = shardcast->add_subcommand(
      "publish", "Publish a file as a signed version in an origin's data directory");
  cmd->add_option("FILE", args->file, "the file (a checkpoint's model.safetensors)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--data-dir", args->data_dir, "the origin's data directory")->required();
  cmd->add_option("--version", args->version, "version number (default: newest listed + 1)");
  cmd->add_option("--step", args->step, "training step (default: the version)");
  cmd->add_option("--key", args->key,
                  "Ed25519 key file signing the manifest, created if absent (default: "
                  "<data-dir>/../trainer.key)");
  cmd->add_option("--shard-size-mib", args->shard_size_mib, "shard size (default 50)");
  cmd->add_option("--keep", args->keep, "versions kept (default 5)");
  cmd->add_flag("--no-delta", args->no_delta,
                "publish no tensor hashes and no delta against the newest earlier version");
  cmd->callback([args] {
    const fs::path data_dir = args->data_dir;
    const fs::path key = args->key.empty() ? fs::absolute(data_dir).parent_path() / "trainer.key"
                                           : fs::path(args->key);
    const Identity signer = Identity::load_or_create(key);
    int64_t version = args->version;
    if (version < 0) {
      const auto manifest = shardcast::read_manifest(data_dir);
      version = manifest.newest() ? manifest.newest()->version + 1 : 0;
    }
    shardcast::PublishOptions options;
    options.shard_size =
        std::max<int64_t>(1, static_cast<int64_t>(args->shard_size_mib * (1 << 20)));
    options.keep = args->keep;
    options.deltas = !args->no_delta;
    const auto entry = shardcast::publish_version(
        data_dir, version, args->step >= 0 ? args->step : version, args->file, signer, options);
    std::cout << fmt::format("published version {} of {} ({} bytes, {} shards) to {}\n",
                             entry.version, args->file, entry.size, entry.shards.size(),
                             data_dir.string());
    if (entry.delta) {
      std::cout << fmt::format(
          "delta against version {}: {} bytes ({:.2f}% of the file), {} of {} elements changed\n",
          entry.delta->base, entry.delta->size,
          100.0 * static_cast<double>(entry.delta->size) / static_cast<double>(entry.size),
          entry.delta->changed_elements, entry.delta->elements);
    }
    std::cout << "trainer key: " << signer.address() << "\n";
  });
}

void add_fetch_command(CLI::App* shardcast) {
  struct Args {
    std::string relays, version = "latest", out, trainer_key, cache_dir, choice = "weighted",
                        source_ip, stats_json, base;
    int64_t base_version = -1;
    bool no_signature_check = false, no_endgame = false;
    int parallel = 8;
    double stall_s = 10, timeout_s = 600;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = shardcast->add_subcommand(
      "fetch", "Download a version from relays, verify every shard and the whole file");
  cmd->add_option("--relays", args->relays, "relay URLs, comma-separated")->required();
  cmd->add_option("--version", args->version, "a version number, or latest (default)");
  cmd->add_option("--out", args->out, "where the verified file goes")->required();
  cmd->add_option("--trainer-key", args->trainer_key,
                  "the trainer's public key (hex): only versions it signed are fetched");
  cmd->add_flag("--no-signature-check", args->no_signature_check,
                "fetch without --trainer-key (hashes are still checked)");
  cmd->add_option("--cache-dir", args->cache_dir,
                  "verified shards of unfinished fetches (default: <out>.shards)");
  cmd->add_option("--parallel", args->parallel, "shards downloading at once (default 8)");
  cmd->add_option("--choice", args->choice, "weighted (default) | fastest");
  cmd->add_flag("--no-endgame", args->no_endgame,
                "never split the last transfers between relays (for comparison)");
  cmd->add_option("--source-ip", args->source_ip, "local address to connect from");
  cmd->add_option("--stall-s", args->stall_s, "abandon a transfer stalled this long (default 10)");
  cmd->add_option("--timeout-s", args->timeout_s, "give the version up after this (default 600)");
  cmd->add_option("--stats-json", args->stats_json, "also write the fetch's statistics here");
  cmd->add_option("--base", args->base,
                  "a verified earlier version held here: its successor's delta applies to it");
  cmd->add_option("--base-version", args->base_version, "the version --base holds");
  cmd->callback([args] {
    if (args->trainer_key.empty() && !args->no_signature_check)
      fail("--trainer-key", "give the trainer's public key, or --no-signature-check");
    shardcast::ClientOptions o;
    for (size_t at = 0; at <= args->relays.size();) {
      const size_t comma = std::min(args->relays.find(',', at), args->relays.size());
      if (comma > at) o.relays.push_back(args->relays.substr(at, comma - at));
      at = comma + 1;
    }
    o.trainer_public_key = args->trainer_key;
    o.cache_dir = args->cache_dir.empty() ? args->out + ".shards" : args->cache_dir;
    o.choice = shardcast::parse_relay_choice(args->choice, "--choice");
    o.fetch.parallel = std::max(1, args->parallel);
    o.fetch.endgame = !args->no_endgame;
    o.fetch.http.stall_s = args->stall_s;
    o.fetch.version_timeout_s = args->timeout_s;
    o.fetch.http.source_ip = args->source_ip;
    o.seed = std::random_device{}();
    shardcast::Client client(o);
    int64_t version = -1;
    if (args->version == "latest") {
      const auto newest = client.newest();
      if (!newest) fail(args->relays, "no relay lists a version signed by the trainer");
      version = *newest;
    } else {
      try {
        version = std::stoll(args->version);
      } catch (const std::exception&) {
        fail("--version", "'{}' is neither a number nor latest", args->version);
      }
    }
    if (args->base.empty() != (args->base_version < 0))
      fail("--base", "give --base FILE and --base-version N together");
    std::optional<shardcast::HeldVersion> held;
    if (!args->base.empty()) held = shardcast::HeldVersion{args->base_version, args->base};
    const auto report = client.fetch(version, args->out, held);
    std::cout << "fetched " << report.summary() << "\n";
    if (!args->stats_json.empty()) {
      Json relays = Json::array();
      for (const auto& r : report.relays)
        relays.push_back({{"url", r.url},
                          {"bandwidth_bytes_per_s", r.bandwidth},
                          {"success", r.success},
                          {"downloads", r.downloads},
                          {"failures", r.failures},
                          {"bytes", r.bytes}});
      write_file_atomic(args->stats_json,
                        Json{{"version", report.version},
                             {"bytes", report.bytes},
                             {"full_bytes", report.full_bytes},
                             {"from_delta", report.from_delta},
                             {"delta_error", report.delta_error},
                             {"seconds", report.seconds},
                             {"shards_downloaded", report.shards.shards_downloaded},
                             {"shards_reused", report.shards.shards_reused},
                             {"failed_attempts", report.shards.failed_attempts},
                             {"corrupt_shards", report.shards.corrupt_shards},
                             {"splits", report.shards.splits},
                             {"relays", relays}}
                            .dump(1));
    }
  });
}

}  // namespace

void add_shardcast_commands(CLI::App& app) {
  add_relay_command(app);
  auto* shardcast = app.add_subcommand("shardcast", "Publish and fetch checkpoint versions");
  shardcast->require_subcommand(1);
  add_publish_command(shardcast);
  add_fetch_command(shardcast);
}

}  // namespace trellis::cli
