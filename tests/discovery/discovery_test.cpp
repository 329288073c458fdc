// The discovery service on loopback, with each backend (SQLite, and a real redis-server): nodes
// publish signed metadata; only the orchestrator's key lists endpoints; forged, replayed,
// malformed and oversized publications are refused naming why; one IP holds at most its limit of
// live addresses; entries expire; the store survives a restart; `trellis discovery` serves the
// same.
#include "discovery/server.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "cli/trellis_process.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/request_signing.h"
#include "discovery/client.h"
#include "error_of.h"
#include "redis_process.h"

namespace trellis::discovery {
namespace {

namespace fs = std::filesystem;

#define EXPECT_CONTAINS(haystack, needle)                                                       \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" \
                                                        << (haystack)

// The server's clock (time() reads a coarser one, which can lag into the previous second).
int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

NodeMetadata metadata(const Identity& node, int port = 9100) {
  NodeMetadata m;
  m.address = node.address();
  m.endpoint = "http://10.0.0.5:" + std::to_string(port);
  m.hardware = {"AMD EPYC", 2, 24 * 1024, 100 * 1024, 1000, {{"NVIDIA H100", 80 * 1024}}};
  m.software_version = "0.1.0";
  return m;
}

// GetParam(): the backend, "sqlite" or "redis".
class Discovery : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() /
           ("trellis_discovery_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    if (GetParam() == "redis") redis_ = std::make_unique<test::RedisProcess>(dir_ / "redis");
  }
  void TearDown() override {
    server_.reset();
    redis_.reset();
    fs::remove_all(dir_);
  }
  ServerOptions options() const {
    ServerOptions o;
    o.port = 0;
    o.data_dir = dir_;
    o.readers = {orchestrator_.address()};
    o.backend = GetParam();
    if (redis_) o.redis = redis_->address();
    return o;
  }
  // The --set flags of `trellis discovery` for this backend.
  std::vector<std::string> backend_flags() const {
    std::vector<std::string> flags = {"--set", "discovery.backend=" + GetParam()};
    if (redis_) flags.insert(flags.end(), {"--set", "discovery.redis=" + redis_->address()});
    return flags;
  }
  void start(const ServerOptions& o) {
    server_ = std::make_unique<Server>(o);
    port_ = server_->start();
    client_ = std::make_unique<Client>(server_->url());
  }
  // A raw PUT of `body` for `address`, signed by `signer` (unsigned when null).
  httplib::Result put(const std::string& address, const std::string& body, const Identity* signer,
                      httplib::Headers extra = {}) {
    httplib::Client http("127.0.0.1", port_);
    const std::string path = "/nodes/" + address;
    httplib::Headers headers = std::move(extra);
    if (signer) {
      for (auto& [k, v] :
           sign_request(*signer, client_->id(), "PUT", path, sha256_hex(body), unix_now())) {
        headers.emplace(k, v);
      }
    }
    return http.Put(path, headers, body, "application/json");
  }
  static std::string error_text(const httplib::Result& res) {
    return res ? res->body : std::string("no response");
  }

  fs::path dir_;
  Identity orchestrator_ = Identity::generate(), node_ = Identity::generate();
  std::unique_ptr<test::RedisProcess> redis_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
  int port_ = 0;
};

TEST_P(Discovery, EndpointsAreListedOnlyToTheOrchestrator) {
  start(options());
  client_->publish(node_, metadata(node_));
  const auto nodes = client_->nodes(orchestrator_);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].metadata.address, node_.address());
  EXPECT_EQ(nodes[0].metadata.endpoint, "http://10.0.0.5:9100");
  EXPECT_EQ(nodes[0].metadata.hardware.gpus.at(0).name, "NVIDIA H100");
  EXPECT_EQ(nodes[0].metadata.hardware.memory_mib, 24 * 1024);
  EXPECT_EQ(nodes[0].ip, "127.0.0.1");
  // Another node, even a published one, sees nothing; nor does an unsigned request.
  EXPECT_CONTAINS(test::error_of([&] { client_->nodes(node_); }), "may not read node endpoints");
  httplib::Client http("127.0.0.1", port_);
  auto res = http.Get("/nodes");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = http.Get("/status");  // public: how many, never where
  ASSERT_TRUE(res);
  EXPECT_EQ(parse_json(res->body, "status")["nodes"], 1);
  EXPECT_EQ(res->body.find("10.0.0.5"), std::string::npos);
}

TEST_P(Discovery, ForgedMalformedAndOversizedPublicationsAreRefused) {
  start(options());
  const Identity other = Identity::generate();
  const std::string good = to_json(metadata(node_)).dump();
  auto res = put(node_.address(), good, nullptr);
  EXPECT_EQ(res->status, 401);
  res = put(node_.address(), good, &other);  // someone else publishing this node
  EXPECT_EQ(res->status, 403);
  EXPECT_CONTAINS(error_text(res), "signed by " + other.address());
  res = put("not-an-address", good, &node_);
  EXPECT_EQ(res->status, 400);
  // Each malformed field is named.
  for (const auto& [field, value, named] : std::vector<std::tuple<std::string, Json, std::string>>{
           {"endpoint", "ftp://x", "endpoint"},
           {"endpoint", std::string(300, 'h'), "endpoint"},
           {"software_version", 7, "software_version"},
           {"hardware", Json{{"cpu_model", "x"}}, "cpu_cores"}}) {
    Json j = to_json(metadata(node_));
    j[field] = value;
    res = put(node_.address(), j.dump(), &node_);
    EXPECT_EQ(res->status, 400) << field;
    EXPECT_CONTAINS(error_text(res), named);
  }
  Json many = to_json(metadata(node_));
  many["hardware"]["gpus"] = Json::array();
  for (int i = 0; i < 65; ++i)
    many["hardware"]["gpus"].push_back({{"name", "g"}, {"memory_mib", 1}});
  res = put(node_.address(), many.dump(), &node_);
  EXPECT_EQ(res->status, 400);
  EXPECT_CONTAINS(error_text(res), "more than 64 GPUs");
  // 1 MiB of metadata is refused before it is read (413, or the connection closed while the
  // client still sends): read, it would have been a 400 naming cpu_model.
  Json padded = to_json(metadata(node_));
  padded["hardware"]["cpu_model"] = std::string(1 << 20, 'x');
  res = put(node_.address(), padded.dump(), &node_);
  if (res) EXPECT_EQ(res->status, 413) << error_text(res);
  EXPECT_EQ(httplib::Client("127.0.0.1", port_).Get("/healthz")->status, 200);
  // The same signed request twice: the second is a replay.
  httplib::Headers headers;
  for (auto& [k, v] : sign_request(node_, client_->id(), "PUT", "/nodes/" + node_.address(),
                                   sha256_hex(good), unix_now())) {
    headers.emplace(k, v);
  }
  httplib::Client http("127.0.0.1", port_);
  EXPECT_EQ(http.Put("/nodes/" + node_.address(), headers, good, "application/json")->status, 200);
  res = http.Put("/nodes/" + node_.address(), headers, good, "application/json");
  EXPECT_EQ(res->status, 401);
  EXPECT_CONTAINS(error_text(res), "replay");
  EXPECT_EQ(client_->nodes(orchestrator_).size(), 1u);  // only the honest publication
}

TEST_P(Discovery, OneIpHoldsAtMostItsLimitAndStaleEntriesExpire) {
  ServerOptions o = options();
  o.limits.max_nodes_per_ip = 3;
  o.limits.ttl_s = 2;
  start(o);
  std::vector<Identity> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(Identity::generate());
    client_->publish(nodes.back(), metadata(nodes.back(), 9100 + i));
  }
  const Identity fourth = Identity::generate();
  EXPECT_CONTAINS(test::error_of([&] { client_->publish(fourth, metadata(fourth)); }),
                  "already has 3 live nodes");
  client_->publish(nodes[0], metadata(nodes[0], 9200));  // a refresh is no new node
  for (const DiscoveredNode& n : client_->nodes(orchestrator_)) {
    if (n.metadata.address == nodes[0].address())
      EXPECT_EQ(n.metadata.endpoint, "http://10.0.0.5:9200");
  }
  // Two seconds without a refresh and the other two are gone: room for the fourth.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  client_->publish(fourth, metadata(fourth));
  const auto live = client_->nodes(orchestrator_);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].metadata.address, fourth.address());
}

TEST_P(Discovery, TheStoreAndItsIdSurviveARestart) {
  start(options());
  const std::string id = client_->id();
  client_->publish(node_, metadata(node_));
  server_.reset();
  start(options());
  EXPECT_EQ(client_->id(), id);  // requests signed for it stay valid
  ASSERT_EQ(client_->nodes(orchestrator_).size(), 1u);
}

TEST_P(Discovery, TheCommandServesAndRefusesAReaderThatIsNoAddress) {
  std::vector<std::string> args = {"discovery", "--run-dir", dir_.string(), "--set",
                                   "discovery.readers=[\"orchestrator\"]"};
  const auto flags = backend_flags();
  args.insert(args.end(), flags.begin(), flags.end());
  test::TrellisProcess bad(args);
  EXPECT_NE(bad.wait(std::chrono::seconds(30)), 0);
  for (int i = 0; i < 100 && bad.log().find("readers") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the rest of its stderr
  }
  EXPECT_CONTAINS(bad.log(), "discovery.readers[0]");
  args = {"discovery",
          "--run-dir",
          dir_.string(),
          "--set",
          "discovery.port=0",
          "--set",
          "discovery.readers=[\"" + orchestrator_.address() + "\"]"};
  args.insert(args.end(), flags.begin(), flags.end());
  test::TrellisProcess good(args);
  std::string url;
  for (int i = 0; i < 600 && url.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    try {
      url = read_file(dir_ / "discovery.url");
    } catch (const Error&) {
    }
  }
  ASSERT_FALSE(url.empty()) << good.log();
  while (url.back() == '\n') url.pop_back();
  Client client(url);
  client.publish(node_, metadata(node_));
  EXPECT_EQ(client.nodes(orchestrator_).size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, Discovery, ::testing::Values("sqlite", "redis"),
                         [](const auto& info) { return info.param; });

// A node may be pointed at any discovery service: an answer past the bound is cut off while read
// (without it, the client held the whole 70 MiB status), and a refusal's reason is cut short.
TEST(DiscoveryClient, AHostileServicesAnswersAreBounded) {
  std::string status_body, refusal;
  httplib::Server hostile;
  hostile.Get("/status", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(status_body, "application/json");
  });
  hostile.Put(".*", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 403;
    res.set_content(refusal, "application/json");
  });
  const int port = hostile.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { hostile.listen_after_bind(); });
  const Identity node = Identity::generate();
  NodeMetadata m = metadata(node);

  status_body = Json{{"id", std::string(size_t{70} << 20, 'x')}}.dump();
  Client big("http://127.0.0.1:" + std::to_string(port));
  EXPECT_CONTAINS(test::error_of([&] { big.publish(node, m); }),
                  "the answer is larger than the 67108864 bytes it may hold");

  status_body = Json{{"id", 1e41}}.dump();
  Client wrong_type("http://127.0.0.1:" + std::to_string(port));
  EXPECT_CONTAINS(test::error_of([&] { wrong_type.publish(node, m); }),
                  "field 'id' has the wrong type (number)");

  status_body = Json{{"id", "discovery-1"}}.dump();
  refusal = Json{{"error", std::string(1 << 20, 'y')}}.dump();
  Client refused("http://127.0.0.1:" + std::to_string(port));
  const std::string e = test::error_of([&] { refused.publish(node, m); });
  EXPECT_CONTAINS(e, "publication refused: yyy");
  EXPECT_LT(e.size(), 1000u);
  hostile.stop();
  serving.join();
}

// Redis that does not answer is named with how to fix it.
TEST(DiscoveryRedis, AnUnreachableRedisIsNamed) {
  ServerOptions o;
  o.data_dir = fs::temp_directory_path();
  o.readers = {Identity::generate().address()};
  o.backend = "redis";
  o.redis = "127.0.0.1:" + std::to_string(test::free_port());
  const std::string e = test::error_of([&] { Server s(o); });
  EXPECT_CONTAINS(e, "cannot connect to Redis at " + o.redis);
  EXPECT_CONTAINS(e, "redis-server running");
}

// A Redis that asks for a password (requirepass, or an ACL user): without the password, or with a
// wrong one, the service does not start and says why, never showing the password; with it, it
// serves, and logs in again when Redis comes back after a restart. A password for a Redis that
// takes none is an error too.
TEST(DiscoveryRedis, APasswordProtectedRedisServesOnlyTheLogin) {
  const fs::path dir =
      fs::temp_directory_path() / ("trellis_redis_login_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string password = "correct horse battery staple 0123";
  const std::vector<std::string> protect = {"--requirepass", password, "--user",
                                            "trellis",       "on",     ">user password 4567",
                                            "~trellis:*",    "+@all"};
  auto redis = std::make_unique<test::RedisProcess>(dir / "redis", protect);
  const Identity orchestrator = Identity::generate(), node = Identity::generate();
  ServerOptions o;
  o.port = 0;
  o.data_dir = dir;
  o.readers = {orchestrator.address()};
  o.backend = "redis";
  o.redis = redis->address();

  std::string e = test::error_of([&] { Server s(o); });
  EXPECT_CONTAINS(e, "Redis asks for a password");
  EXPECT_CONTAINS(e, "discovery.redis_password_file");
  o.redis_login = {"", "not the password", "/etc/trellis/redis.password"};
  e = test::error_of([&] { Server s(o); });
  EXPECT_CONTAINS(e, "Redis refused the login with the password from /etc/trellis/redis.password");
  EXPECT_EQ(e.find("not the password"), std::string::npos) << e;
  o.redis_login = {"someone", "user password 4567", "TRELLIS_REDIS_PASSWORD"};
  e = test::error_of([&] { Server s(o); });
  EXPECT_CONTAINS(e,
                  "Redis refused the login of user 'someone' with the password from "
                  "TRELLIS_REDIS_PASSWORD");

  for (const RedisLogin& login : {RedisLogin{"", password, "TRELLIS_REDIS_PASSWORD"},
                                  RedisLogin{"trellis", "user password 4567", "a file"}}) {
    o.redis_login = login;
    Server server(o);
    server.start();
    Client client(server.url());
    client.publish(node, metadata(node));
    EXPECT_EQ(client.nodes(orchestrator).size(), 1u) << login.user;
  }

  // Redis restarts on the same port, empty: the first call finds the connection gone, the next
  // reconnects and logs in again (without that, Redis answers NOAUTH).
  Server server(o);
  server.start();
  Client client(server.url());
  const int port = redis->port();
  redis.reset();
  redis = std::make_unique<test::RedisProcess>(dir / "redis", protect, port);
  // The lost connection is the service's failure: 503, logged, nothing of the store's address
  // or its error told to the client.
  const std::string lost = test::error_of([&] { client.nodes(orchestrator); });
  EXPECT_CONTAINS(lost, "the discovery store is unavailable");
  EXPECT_EQ(lost.find(redis->address()), std::string::npos) << lost;
  const Identity other = Identity::generate();
  client.publish(other, metadata(other));
  const auto nodes = client.nodes(orchestrator);
  ASSERT_EQ(nodes.size(), 1u) << "the first call after the restart: " << lost;
  EXPECT_EQ(nodes[0].metadata.address, other.address());

  // A password for a Redis that takes none.
  test::RedisProcess open(dir / "open");
  o.redis = open.address();
  o.redis_login = {"", password, "TRELLIS_REDIS_PASSWORD"};
  e = test::error_of([&] { Server s(o); });
  EXPECT_CONTAINS(e, "Redis takes no password, but one was given (TRELLIS_REDIS_PASSWORD)");
  fs::remove_all(dir);
}

// discovery.redis_user and the password: TRELLIS_REDIS_PASSWORD wins over
// discovery.redis_password_file, which must be private to its owner; a user needs a password; a
// SQLite service reads neither.
TEST(DiscoveryRedis, ThePasswordComesFromTheEnvironmentOrAPrivateFile) {
  const fs::path dir =
      fs::temp_directory_path() / ("trellis_redis_secret_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "redis.password";
  const auto config = [&](const std::string& backend, const std::string& user) {
    return Config::resolve({}, {"discovery.backend=\"" + backend + "\"",
                                "discovery.readers=[\"" + Identity::generate().address() + "\"]",
                                "discovery.redis_user=\"" + user + "\"",
                                "discovery.redis_password_file=\"" + file.string() + "\""});
  };
  ::unsetenv("TRELLIS_REDIS_PASSWORD");
  std::string e = test::error_of([&] { server_options(config("redis", ""), dir); });
  EXPECT_CONTAINS(e, "does not exist: write Redis's password into it");
  EXPECT_FALSE(fs::exists(file)) << "a missing password file is never created";
  EXPECT_EQ(server_options(config("sqlite", ""), dir).redis_login.password, "");

  write_file_atomic(file, "from the file\n");
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  e = test::error_of([&] { server_options(config("redis", ""), dir); });
  EXPECT_CONTAINS(e, "accessible to other users");
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  auto login = server_options(config("redis", "trellis"), dir).redis_login;
  EXPECT_EQ(login.user, "trellis");
  EXPECT_EQ(login.password, "from the file");
  EXPECT_EQ(login.source, file.string());

  ::setenv("TRELLIS_REDIS_PASSWORD", "from the environment", 1);
  login = server_options(config("redis", ""), dir).redis_login;
  ::unsetenv("TRELLIS_REDIS_PASSWORD");
  EXPECT_EQ(login.password, "from the environment");
  EXPECT_EQ(login.source, "TRELLIS_REDIS_PASSWORD");

  fs::remove(file);
  e = test::error_of([&] {
    server_options(
        Config::resolve({}, {"discovery.backend=\"redis\"",
                             "discovery.readers=[\"" + Identity::generate().address() + "\"]",
                             "discovery.redis_user=\"trellis\""}),
        dir);
  });
  EXPECT_CONTAINS(e, "discovery.redis_user");
  EXPECT_CONTAINS(e, "needs a password");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trellis::discovery
