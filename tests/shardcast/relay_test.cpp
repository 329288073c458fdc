// SHARDCAST end to end on loopback: `trellis relay` processes pulling from an origin served by the
// built-in server, clients fetching from them, and the faults the spec names: a relay serving a
// corrupted shard, a relay killed mid-download, a stalled relay, a version signed by someone
// else. Also pipelining, retention along a chain, the allowlist fed by a real orchestrator, and
// per-IP rate limits.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "cli/trellis_process.h"
#include "common/files.h"
#include "common/hashing.h"
#include "error_of.h"
#include "fake_weights.h"
#include "orchestrator/api.h"
#include "orchestrator/client.h"
#include "shardcast/client.h"
#include "shardcast/origin.h"
#include "shardcast/shard_server.h"
#include "shardcast_test_util.h"

namespace trellis::shardcast {
namespace {
namespace fs = std::filesystem;
using test::status_of;
using Clock = std::chrono::steady_clock;
using test::error_of;
using test::TempDir;
using test::TrellisProcess;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What a server's manifest says now (empty when it does not answer).
Manifest manifest_at(const std::string& url, const std::string& source_ip = "") {
  HttpOptions http;
  http.timeout_s = 5;
  http.source_ip = source_ip;
  std::string body;
  if (!http_get_string(url + "/manifest.json", http, body).ok()) return {};
  return parse_manifest(body, url);
}

// The value of the first sample of `metric` in a server's /metrics (0 when it has none).
double metric_of(const std::string& url, const std::string& metric) {
  HttpOptions http;
  http.timeout_s = 5;
  std::string body;
  if (!http_get_string(url + "/metrics", http, body).ok()) return 0;
  const auto at = body.find("\n" + metric);
  if (at == std::string::npos) return 0;
  return std::stod(body.substr(body.find(' ', at) + 1));
}

// trellis_shardcast_bytes_sent_total from a server's /metrics.
double bytes_sent(const std::string& url) {
  return metric_of(url, "trellis_shardcast_bytes_sent_total{");
}

// Polls until `pred` holds (true) or `timeout_s` passes (false).
template <typename Pred>
bool eventually(Pred pred, double timeout_s) {
  const auto t0 = Clock::now();
  while (seconds_since(t0) < timeout_s) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// A `trellis relay` process on a free port, serving `data_dir`, pulling from `upstreams`.
struct RelayProcess {
  RelayProcess(const fs::path& run_dir, const std::string& name, const fs::path& data_dir,
               const std::vector<std::string>& upstreams, std::vector<std::string> extra = {}) {
    std::string list;
    for (const auto& u : upstreams) list += (list.empty() ? "\"" : ",\"") + u + "\"";
    std::vector<std::string> args = {"relay",
                                     "--run-dir",
                                     run_dir.string(),
                                     "--set",
                                     "relay.name=" + name,
                                     "--set",
                                     "relay.port=0",
                                     "--set",
                                     "relay.data_dir=" + data_dir.string(),
                                     "--set",
                                     "relay.upstreams=[" + list + "]",
                                     "--set",
                                     "relay.poll_s=0.1",
                                     "--set",
                                     "shardcast.stall_s=2"};
    for (auto& e : extra) {
      args.push_back("--set");
      args.push_back(std::move(e));
    }
    fs::remove(data_dir / "relay.url");
    process = std::make_unique<TrellisProcess>(args);
    const bool up =
        eventually([&] { return fs::exists(data_dir / "relay.url") || process->exited(); }, 60);
    if (!up || process->exited())
      throw std::runtime_error("relay did not start:\n" + process->log());
    url = read_file(data_dir / "relay.url");
    while (!url.empty() && url.back() == '\n') url.pop_back();
  }
  std::unique_ptr<TrellisProcess> process;
  std::string url;
};

// An origin: a data directory with published versions, served by the built-in server.
struct Origin {
  explicit Origin(const fs::path& dir, AccessLimits limits = {}) : dir(dir) {
    ServerOptions o;
    o.data_dir = dir;
    o.limits = limits;
    o.name = "origin";
    fs::create_directories(dir);
    ensure_probe_file(dir, 64 << 10);
    server = std::make_unique<ShardServer>(o);
    server->start();
    url = server->url();
  }
  // Publishes `bytes` random bytes as `version`; returns them.
  std::string publish(int64_t version, size_t bytes, int64_t shard_size) {
    return publish(version, test::random_bytes(bytes, static_cast<uint64_t>(version) + 17),
                   shard_size);
  }
  // Publishes `data` as `version` (with a delta against the newest earlier version when it is
  // worth one); returns it.
  std::string publish(int64_t version, const std::string& data, int64_t shard_size) {
    write_file_atomic(dir.parent_path() / "staged.bin", data);
    PublishOptions p;
    p.shard_size = shard_size;
    p.probe_size = 64 << 10;
    publish_version(dir, version, version, dir.parent_path() / "staged.bin", trainer, p);
    return data;
  }
  fs::path dir;
  Identity trainer = Identity::generate();
  std::unique_ptr<ShardServer> server;
  std::string url;
};

ClientOptions client_options(const std::vector<std::string>& relays, const Origin& origin,
                             const fs::path& cache) {
  ClientOptions o;
  o.relays = relays;
  o.trainer_public_key = origin.trainer.address();
  o.cache_dir = cache;
  o.seed = 5;
  o.fetch.http.stall_s = 5;  // tests share 2 cores: a busy moment is not a stall
  o.fetch.version_timeout_s = 120;
  return o;
}

// Copies the origin's data directory for a relay that serves it as it is (no upstream).
fs::path copy_of(const fs::path& dir, const fs::path& to) {
  fs::copy(dir, to, fs::copy_options::recursive);
  return to;
}

TEST(ShardcastRelay, ACorruptShardIsFetchedElsewhereAndTheRelayPenalised) {
  TempDir tmp;
  Origin origin(tmp.path() / "origin");
  const std::string data = origin.publish(1, 40 * 4096, 4096);
  const fs::path bad = copy_of(origin.dir, tmp.path() / "bad");
  // The bad relay serves wrong bytes for every shard (same sizes).
  for (size_t i = 0; i < 40; ++i)
    write_file_atomic(bad / "v1" / shard_file_name(i), test::random_bytes(4096, 1000 + i));
  RelayProcess a(tmp.path(), "bad", bad, {});
  RelayProcess b(tmp.path(), "good", copy_of(origin.dir, tmp.path() / "good"), {});

  Client client(client_options({a.url, b.url}, origin, tmp.path() / "cache"));
  const auto report = client.fetch(1, tmp.path() / "out.bin");
  EXPECT_EQ(read_file(tmp.path() / "out.bin"), data);
  EXPECT_GE(report.shards.corrupt_shards, 1);
  // A shard goes to another relay after the bad one failed it: never twice to the bad one.
  EXPECT_LE(report.shards.failed_attempts, 40);
  EXPECT_GE(report.relays[0].failures, 1);
  EXPECT_EQ(report.relays[0].downloads, report.relays[0].failures);  // nothing good from it
  EXPECT_LT(report.relays[0].success, report.relays[1].success);
  EXPECT_FALSE(fs::exists(tmp.path() / "cache" / "v1"));  // done with: the cache is emptied
}

TEST(ShardcastRelay, ARelayKilledMidDownloadLeavesTheOthersToFinishIt) {
  TempDir tmp;
  Origin origin(tmp.path() / "origin");
  const std::string data = origin.publish(1, 2 << 20, 64 << 10);  // 32 shards
  // 1 MiB/s per relay for this client: the download takes about a second with both.
  RelayProcess a(tmp.path(), "a", copy_of(origin.dir, tmp.path() / "a"), {},
                 {"relay.bandwidth_mib_s=1"});
  RelayProcess b(tmp.path(), "b", copy_of(origin.dir, tmp.path() / "b"), {},
                 {"relay.bandwidth_mib_s=1"});
  Client client(client_options({a.url, b.url}, origin, tmp.path() / "cache"));
  auto fetch =
      std::async(std::launch::async, [&] { return client.fetch(1, tmp.path() / "out.bin"); });
  // Mid-download: once `a` has sent shard bytes beyond its 1 MiB probe.
  ASSERT_TRUE(eventually([&] { return bytes_sent(a.url) > (1 << 20) + (64 << 10); }, 30));
  a.process->signal(SIGKILL);
  const auto report = fetch.get();
  EXPECT_EQ(read_file(tmp.path() / "out.bin"), data);
  EXPECT_LT(report.relays[0].bytes, static_cast<int64_t>(data.size()));
  EXPECT_GT(report.relays[1].bytes, 0);
}

TEST(ShardcastRelay, AStalledRelayTimesOutInsteadOfHangingTheDownload) {
  TempDir tmp;
  Origin origin(tmp.path() / "origin");
  const std::string data = origin.publish(1, 2 << 20, 64 << 10);
  RelayProcess a(tmp.path(), "a", copy_of(origin.dir, tmp.path() / "a"), {},
                 {"relay.bandwidth_mib_s=1"});
  RelayProcess b(tmp.path(), "b", copy_of(origin.dir, tmp.path() / "b"), {},
                 {"relay.bandwidth_mib_s=1"});
  auto o = client_options({a.url, b.url}, origin, tmp.path() / "cache");
  o.fetch.http.stall_s = 1;
  o.fetch.endgame = false;  // which would race the stalled transfers instead of timing them out
  Client client(o);
  auto fetch =
      std::async(std::launch::async, [&] { return client.fetch(1, tmp.path() / "out.bin"); });
  ASSERT_TRUE(eventually([&] { return bytes_sent(a.url) > (1 << 20) + (64 << 10); }, 30));
  a.process->signal(SIGSTOP);  // accepts connections (the kernel does), answers nothing
  const auto t0 = Clock::now();
  ASSERT_EQ(fetch.wait_for(std::chrono::seconds(90)), std::future_status::ready);
  const auto report = fetch.get();
  EXPECT_EQ(read_file(tmp.path() / "out.bin"), data);
  EXPECT_GE(report.relays[0].failures, 1) << report.summary();  // cut by the stall timer
  EXPECT_LT(seconds_since(t0), 60);
  a.process->signal(SIGCONT);
}

TEST(ShardcastRelay, APipelinedClientFinishesShortlyAfterItsRelay) {
  TempDir tmp;
  // The origin's link is slow (2 MiB/s): the relay needs about 2 s to pull 4 MiB.
  Origin origin(tmp.path() / "origin", {0, 0, 2.0 * (1 << 20)});
  RelayProcess relay(tmp.path(), "r", tmp.path() / "r", {origin.url});
  const std::string data = origin.publish(1, 4 << 20, 128 << 10);
  ASSERT_TRUE(eventually([&] { return manifest_at(relay.url).find(1) != nullptr; }, 30));
  const Manifest listed = manifest_at(relay.url);
  ASSERT_FALSE(listed.find(1)->complete) << "the relay must list the version before it has it";

  // When the relay lists the version complete (it may do so a moment after the client, which
  // takes each shard as it lands, is done).
  Clock::time_point relay_done{};
  std::thread watch([&] {
    eventually(
        [&] {
          const Manifest m = manifest_at(relay.url);
          if (!m.find(1) || !m.find(1)->complete) return false;
          relay_done = Clock::now();
          return true;
        },
        60);
  });
  auto o = client_options({relay.url}, origin, tmp.path() / "cache");
  o.fetch.retry_delay_s = 0.05;
  Client client(o);
  const auto report = client.fetch(1, tmp.path() / "out.bin");
  const auto client_done = Clock::now();
  watch.join();
  EXPECT_EQ(read_file(tmp.path() / "out.bin"), data);
  EXPECT_GT(report.shards.not_yet, 0) << "the client asked for shards the relay did not have yet";
  ASSERT_NE(relay_done, Clock::time_point{});
  const double lag = std::chrono::duration<double>(client_done - relay_done).count();
  EXPECT_LT(lag, 1.0) << "the client finished " << lag << " s after its relay";
  EXPECT_GT(lag, -1.0);
  EXPECT_GT(report.seconds, 1.0);  // it really overlapped with the relay's 2 s pull
}

TEST(ShardcastRelay, TheSixthVersionEvictsTheFirstEverywhereAlongAChain) {
  TempDir tmp;
  Origin origin(tmp.path() / "origin");
  RelayProcess r1(tmp.path(), "r1", tmp.path() / "r1", {origin.url});
  RelayProcess r2(tmp.path(), "r2", tmp.path() / "r2", {r1.url});
  for (int64_t v = 1; v <= 6; ++v) {
    origin.publish(v, 3000, 1024);
    ASSERT_TRUE(eventually(
        [&] {
          const Manifest m = manifest_at(r2.url);
          return m.find(v) && m.find(v)->complete;
        },
        30))
        << "version " << v << " did not reach the end of the chain";
  }
  ASSERT_TRUE(eventually([&] { return !manifest_at(r2.url).find(1); }, 10));
  for (const auto& [url, dir] :
       {std::pair{origin.url, origin.dir}, std::pair{r1.url, tmp.path() / "r1"},
        std::pair{r2.url, tmp.path() / "r2"}}) {
    const Manifest m = manifest_at(url);
    ASSERT_EQ(m.versions.size(), 5u) << url;
    EXPECT_EQ(m.versions.front().version, 2) << url;
    EXPECT_FALSE(fs::exists(dir / "v1")) << dir;
    EXPECT_TRUE(fs::exists(dir / "v6" / shard_file_name(2))) << dir;
  }
}

TEST(ShardcastRelay, OnlyNodesTheOrchestratorListsMayDownloadAndEvictedOnesAreCutOff) {
  TempDir tmp;
  orchestrator::ApiOptions api;
  api.port = 0;
  api.data_dir = tmp.path() / "orchestrator";
  api.run_id = "allowlist";
  api.trainer_token = "a-trainer-token-of-at-least-32-chars";
  fs::create_directories(api.data_dir);
  orchestrator::Server orch(api);
  orch.start();
  Origin origin(tmp.path() / "origin");
  origin.publish(1, 5000, 1024);
  // The relay reads the relay token the orchestrator created in its data directory.
  RelayProcess relay(tmp.path(), "r", copy_of(origin.dir, tmp.path() / "r"), {},
                     {"relay.allowlist_url=" + orch.url(), "relay.allowlist_poll_s=0.1",
                      "orchestrator.data_dir=" + api.data_dir.string()});
  const std::string manifest = relay.url + "/manifest.json";
  EXPECT_EQ(status_of(manifest), 403) << "nobody is registered yet";

  const Identity node = Identity::generate();
  orchestrator::Client(orch.url()).register_node(node);  // from 127.0.0.1
  ASSERT_TRUE(eventually([&] { return status_of(manifest) == 200; }, 10));
  EXPECT_EQ(status_of(manifest, "127.0.0.2"), 403) << "an address no node registered from";
  EXPECT_EQ(status_of(relay.url + "/healthz", "127.0.0.2"), 200);
  Client client(client_options({relay.url}, origin, tmp.path() / "cache"));
  EXPECT_NO_THROW(client.fetch(1, tmp.path() / "out.bin"));

  orchestrator::Client(orch.url(), api.trainer_token).evict(node.address(), "caught cheating");
  EXPECT_TRUE(eventually([&] { return status_of(manifest) == 403; }, 10));
  EXPECT_EQ(status_of(relay.url + shard_url_path(1, 0)), 403);
}

TEST(ShardcastRelay, AllowlistEntriesThatAreNotAddressesNeverReachNginx) {
  // The orchestrator's list becomes nginx `allow` lines: "all", a network or an injected
  // directive would open the relay to everyone. Such a list is refused and the last one kept.
  TempDir tmp;
  httplib::Server fake;  // an orchestrator that went bad
  std::mutex mu;
  std::string answer = R"({"revision": 1, "ips": ["127.0.0.1"]})", authorization;
  fake.Get("/allowlist", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    authorization = req.get_header_value("Authorization");
    res.set_content(answer, "application/json");
  });
  // The relay's token, as a relay on another machine than the orchestrator gets it.
  const std::string token = "the-relay-token-of-this-test-0123456789";
  ::setenv("TRELLIS_RELAY_TOKEN", token.c_str(), 1);
  const int port = fake.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { fake.listen_after_bind(); });
  struct Joiner {  // a failure below (an ASSERT, a relay that did not start) still joins it
    httplib::Server& server;
    std::thread& thread;
    ~Joiner() {
      server.stop();
      thread.join();
    }
  } joiner{fake, serving};
  const fs::path conf = tmp.path() / "allowlist.conf";
  Origin origin(tmp.path() / "origin");
  origin.publish(1, 5000, 1024);
  RelayProcess relay(tmp.path(), "r", copy_of(origin.dir, tmp.path() / "r"), {},
                     {"relay.allowlist_url=http://127.0.0.1:" + std::to_string(port),
                      "relay.allowlist_poll_s=0.05", "relay.nginx_allowlist=" + conf.string()});
  ::unsetenv("TRELLIS_RELAY_TOKEN");
  const std::string manifest = relay.url + "/manifest.json";
  // The relay may answer before its first poll has written nginx's file: wait for both.
  ASSERT_TRUE(eventually([&] { return status_of(manifest) == 200 && fs::exists(conf); }, 10));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(authorization, "Bearer " + token);
  }
  const std::string good = read_file(conf);
  for (const std::string bad : {R"(["all"])", R"(["127.0.0.2; allow all"])", R"(["0.0.0.0/0"])",
                                R"(["127.0.0.1", "example.com"])"}) {
    {
      std::lock_guard lock(mu);
      answer = R"({"revision": 2, "ips": )" + bad + "}";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // several polls
    EXPECT_EQ(read_file(conf), good) << bad;
    EXPECT_EQ(status_of(manifest, "127.0.0.2"), 403) << bad;
    EXPECT_EQ(status_of(manifest), 200) << bad << relay.process->log();
  }
  EXPECT_EQ(good.find("allow all"), std::string::npos);
}

TEST(ShardcastRelay, RequestsBeyondTheRateLimitGet429) {
  TempDir tmp;
  Origin origin(tmp.path() / "origin");
  origin.publish(1, 5000, 1024);
  RelayProcess relay(tmp.path(), "r", copy_of(origin.dir, tmp.path() / "r"), {},
                     {"relay.requests_per_s=2", "relay.burst=4"});
  int ok = 0, limited = 0;
  for (int i = 0; i < 12; ++i) {
    const int s = status_of(relay.url + "/manifest.json");
    ok += s == 200;
    limited += s == 429;
  }
  EXPECT_EQ(ok + limited, 12);
  EXPECT_GE(ok, 4);
  EXPECT_LE(ok, 6);  // the burst, plus what 2/s refills while the loop runs
  EXPECT_GE(limited, 6);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_EQ(status_of(relay.url + "/manifest.json"), 200);
  // Another address has a bucket of its own.
  EXPECT_EQ(status_of(relay.url + "/manifest.json", "127.0.0.3"), 200);
}

TEST(ShardcastRelay, ClientsNeverKeepBytesThatFailVerification) {
  TempDir tmp;
  Origin origin(tmp.path() / "origin");
  origin.publish(1, 8 * 1024, 1024);
  // (1) A relay listing a version signed by a key that is not the trainer's.
  Origin impostor(tmp.path() / "impostor");
  impostor.publish(2, 8 * 1024, 1024);
  fs::rename(impostor.dir / "v2", origin.dir / "v2");
  Manifest forged = read_manifest(origin.dir);
  forged.put(*read_manifest(impostor.dir).find(2));
  write_manifest(origin.dir, forged);
  Client client(client_options({origin.url}, origin, tmp.path() / "cache"));
  EXPECT_EQ(client.newest(), 1) << "version 2 is not the trainer's";
  EXPECT_NE(error_of([&] { client.fetch(2, tmp.path() / "v2.bin"); }).find("signature"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.path() / "v2.bin"));
  // (2) Every relay serves a bad shard 3: the version cannot be completed, nothing is written.
  write_file_atomic(origin.dir / "v1" / shard_file_name(2), test::random_bytes(1024, 9));
  auto o = client_options({origin.url}, origin, tmp.path() / "cache");
  o.fetch.attempts_per_shard = 3;
  Client strict(o);
  const std::string error = error_of([&] { strict.fetch(1, tmp.path() / "v1.bin"); });
  EXPECT_NE(error.find("shard 3 failed 3 times"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(tmp.path() / "v1.bin"));
  EXPECT_FALSE(fs::exists(tmp.path() / "cache" / "v1" / shard_file_name(2)));
  // What was verified stays for a resume: once the good shard is back (the same version
  // published again), the verified shards in the cache are not downloaded again.
  origin.publish(1, 8 * 1024, 1024);
  int64_t cached = 0;
  for (const auto& e : fs::directory_iterator(tmp.path() / "cache" / "v1"))
    cached += e.path().extension() == ".bin";
  EXPECT_GE(cached, 1);
  const auto resumed = strict.fetch(1, tmp.path() / "v1.bin");
  EXPECT_EQ(resumed.shards.shards_reused, cached);
  EXPECT_EQ(resumed.shards.shards_downloaded, 8 - cached);
}

TEST(ShardcastRelay, AVersionThatCannotBeCompletedIsSkippedForTheNextOne) {
  TempDir tmp;
  Origin origin(tmp.path() / "origin");
  origin.publish(1, 4 * 1024, 1024);
  write_file_atomic(origin.dir / "v1" / shard_file_name(1), test::random_bytes(1024, 3));
  auto o = client_options({origin.url}, origin, tmp.path() / "cache");
  o.fetch.attempts_per_shard = 2;
  Client client(o);
  std::string v2;
  const auto report = client.fetch_newest(-1, INT64_MAX, [&](int64_t version) {
    // While version 1 is being fetched (and fails), the trainer publishes version 2.
    if (version == 1) v2 = origin.publish(2, 4 * 1024, 1024);
    return tmp.path() / ("v" + std::to_string(version) + ".bin");
  });
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->version, 2);
  EXPECT_EQ(read_file(tmp.path() / "v2.bin"), v2);
  EXPECT_FALSE(fs::exists(tmp.path() / "v1.bin"));
  // Nothing newer than what is held: nothing to do.
  EXPECT_FALSE(client.fetch_newest(2, INT64_MAX, [&](int64_t) { return tmp.path() / "x"; }));
  // The newest cannot be completed and nothing newer exists: an error naming it.
  write_file_atomic(origin.dir / "v2" / shard_file_name(0), test::random_bytes(1024, 4));
  EXPECT_NE(error_of([&] {
              client.fetch_newest(1, INT64_MAX, [&](int64_t) { return tmp.path() / "y"; });
            }).find("version 2"),
            std::string::npos);
}

// Weight deltas through a real relay: it pulls each version's delta, makes the full version from
// it and the version before, and serves both; a worker holding the version before downloads
// only the delta, and every version it ends with is the trainer's, bit for bit.
TEST(ShardcastDelta, WorkersHoldingTheBaseDownloadOnlyTheDelta) {
  TempDir tmp;
  Origin origin(tmp.path() / "origin");
  test::FakeWeights w(21, 8);
  const int64_t shard = 16 << 10;
  std::vector<std::string> versions = {origin.publish(1, w.file(), shard)};
  RelayProcess relay(tmp.path(), "relay", tmp.path() / "relay", {origin.url});
  Client client(client_options({relay.url}, origin, tmp.path() / "cache"));
  const fs::path first = tmp.path() / "w1.safetensors";
  ASSERT_TRUE(eventually([&] { return client.newest() == 1; }, 30));
  EXPECT_FALSE(client.fetch(1, first).from_delta);  // nothing held: the full version
  HeldVersion held{1, first};
  for (int64_t v = 2; v <= 12; ++v) {
    w.step(v % 3 == 0 ? 0.05 : 0.005);
    versions.push_back(origin.publish(v, w.file(), shard));
    const VersionEntry entry = *read_manifest(origin.dir).find(v);
    ASSERT_TRUE(entry.delta) << "version " << v;
    EXPECT_LT(entry.delta->size, entry.size / 10) << "version " << v;
    ASSERT_TRUE(eventually([&] { return client.newest() == v; }, 30));
    const fs::path out = tmp.path() / ("w" + std::to_string(v) + ".safetensors");
    const FetchReport report = client.fetch(v, out, held);
    EXPECT_TRUE(report.from_delta) << report.summary() << report.delta_error;
    EXPECT_EQ(report.bytes, entry.delta->size);
    ASSERT_EQ(read_file(out), versions.back()) << "version " << v;
    fs::remove(held.file);
    held = {v, out};
  }
  // The relay made its full versions from the deltas, and they are the trainer's.
  ASSERT_TRUE(eventually(
      [&] { return manifest_at(relay.url).find(12) && manifest_at(relay.url).find(12)->complete; },
      30));
  EXPECT_GE(metric_of(relay.url, "trellis_relay_versions_from_delta_total "), 10);
  EXPECT_EQ(read_file(tmp.path() / "relay" / "v12" / shard_file_name(0)),
            read_file(origin.dir / "v12" / shard_file_name(0)));
}

TEST(ShardcastDelta, ACorruptOrMissingDeltaFallsBackToTheFullVersion) {
  TempDir tmp;
  Origin origin(tmp.path() / "origin");
  test::FakeWeights w(22, 4);
  const int64_t shard = 8 << 10;
  origin.publish(1, w.file(), shard);
  write_file_atomic(tmp.path() / "held", w.file());
  w.step(0.01);
  const std::string v2 = origin.publish(2, w.file(), shard);
  const VersionEntry entry = *read_manifest(origin.dir).find(2);
  ASSERT_TRUE(entry.delta);
  // (1) Every relay serves a corrupt delta: each shard fails its hash, then the full version.
  const fs::path bad = copy_of(origin.dir, tmp.path() / "bad");
  for (size_t i = 0; i < entry.delta->shards.size(); ++i) {
    write_file_atomic(bad / "v2" / shard_file_name(i, FileKind::Delta),
                      test::random_bytes(entry.delta->shards[i].size, 40 + i));
  }
  RelayProcess corrupt(tmp.path(), "corrupt", bad, {});
  auto o = client_options({corrupt.url}, origin, tmp.path() / "cache");
  o.fetch.attempts_per_shard = 2;
  Client client(o);
  const HeldVersion held{1, tmp.path() / "held"};
  FetchReport r = client.fetch(2, tmp.path() / "a", held);
  EXPECT_FALSE(r.from_delta);
  EXPECT_NE(r.delta_error.find("delta"), std::string::npos) << r.delta_error;
  EXPECT_EQ(r.bytes, entry.size);
  EXPECT_EQ(read_file(tmp.path() / "a"), v2);
  // (2) A relay without the delta's shards (deleted): the same.
  const fs::path missing = copy_of(origin.dir, tmp.path() / "missing");
  for (size_t i = 0; i < entry.delta->shards.size(); ++i)
    fs::remove(missing / "v2" / shard_file_name(i, FileKind::Delta));
  RelayProcess without(tmp.path(), "without", missing, {});
  o.relays = {without.url};
  o.fetch.version_timeout_s = 5;  // a delta that never appears is given up
  r = Client(o).fetch(2, tmp.path() / "b", held);
  EXPECT_FALSE(r.from_delta);
  EXPECT_EQ(read_file(tmp.path() / "b"), v2);
  // (3) A base that is not the version it claims: a tensor fails its hash, then the full.
  test::FakeWeights other(5, 4);
  write_file_atomic(tmp.path() / "wrong", other.file());
  o.relays = {origin.url};
  r = Client(o).fetch(2, tmp.path() / "c", HeldVersion{1, tmp.path() / "wrong"});
  EXPECT_FALSE(r.from_delta);
  EXPECT_NE(r.delta_error.find("does not match the trainer's signed hash"), std::string::npos)
      << r.delta_error;
  EXPECT_EQ(read_file(tmp.path() / "c"), v2);
  // The good delta from the origin itself works.
  r = Client(o).fetch(2, tmp.path() / "d", held);
  EXPECT_TRUE(r.from_delta) << r.delta_error;
  EXPECT_EQ(read_file(tmp.path() / "d"), v2);
}

TEST(ShardcastDelta, ALateJoinerCatchesUp) {
  TempDir tmp;
  Origin origin(tmp.path() / "origin");
  test::FakeWeights w(23, 4);
  const int64_t shard = 8 << 10;
  std::string newest;
  for (int64_t v = 1; v <= 5; ++v) {
    w.step(0.01);
    newest = origin.publish(v, w.file(), shard);
  }
  // A relay that starts now pulls one full version and the deltas after it; a worker that
  // starts now, holding nothing, takes the newest full version from it.
  RelayProcess relay(tmp.path(), "late", tmp.path() / "late", {origin.url});
  ASSERT_TRUE(eventually(
      [&] { return manifest_at(relay.url).find(5) && manifest_at(relay.url).find(5)->complete; },
      30));
  EXPECT_GE(metric_of(relay.url, "trellis_relay_versions_from_delta_total "), 1);
  Client client(client_options({relay.url}, origin, tmp.path() / "cache"));
  const auto first = client.fetch_newest(
      -1, INT64_MAX, [&](int64_t v) { return tmp.path() / ("w" + std::to_string(v)); });
  ASSERT_TRUE(first);
  EXPECT_EQ(first->version, 5);
  EXPECT_FALSE(first->from_delta);
  EXPECT_EQ(read_file(tmp.path() / "w5"), newest);
  // From then on, deltas.
  w.step(0.01);
  newest = origin.publish(6, w.file(), shard);
  ASSERT_TRUE(eventually([&] { return client.newest() == 6; }, 30));
  const auto next = client.fetch_newest(
      5, INT64_MAX, [&](int64_t v) { return tmp.path() / ("w" + std::to_string(v)); },
      HeldVersion{5, tmp.path() / "w5"});
  ASSERT_TRUE(next);
  EXPECT_TRUE(next->from_delta) << next->delta_error;
  EXPECT_EQ(read_file(tmp.path() / "w6"), newest);
  // A worker that missed versions applies the deltas in between, one after the other.
  int64_t deltas = 0;
  for (int64_t v = 7; v <= 9; ++v) {
    w.step(0.01);
    newest = origin.publish(v, w.file(), shard);
    deltas += read_manifest(origin.dir).find(v)->delta.value().size;
  }
  ASSERT_TRUE(eventually([&] { return client.newest() == 9; }, 30));
  const auto chained = client.fetch(9, tmp.path() / "w9", HeldVersion{6, tmp.path() / "w6"});
  EXPECT_TRUE(chained.from_delta) << chained.delta_error;
  EXPECT_EQ(chained.bytes, deltas);
  EXPECT_EQ(read_file(tmp.path() / "w9"), newest);
  EXPECT_FALSE(fs::exists(tmp.path() / "cache" / "v9")) << "intermediate versions are removed";
}

}  // namespace
}  // namespace trellis::shardcast
