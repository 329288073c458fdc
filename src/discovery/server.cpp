#include "discovery/server.h"

#include <httplib.h>

#include <csignal>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/http_limits.h"
#include "common/http_service.h"
#include "common/identity.h"
#include "common/logging.h"
#include "common/request_signing.h"
#include "discovery/redis_store.h"

namespace trellis::discovery {
namespace {

constexpr size_t kMaxNonces = 100'000;          // signed requests remembered within the window
constexpr size_t kMaxNoncesPerAddress = 4'096;  // of them from one client address
constexpr const char* kRedisPasswordEnv = "TRELLIS_REDIS_PASSWORD";

// discovery.redis_user, and the password from the environment or discovery.redis_password_file.
RedisLogin redis_login(const Config& config) {
  RedisLogin login;
  login.user = config.get<std::string>("discovery.redis_user");
  const std::string file = config.get<std::string>("discovery.redis_password_file");
  if (const char* v = std::getenv(kRedisPasswordEnv); v && *v) {
    login.password = v;
    login.source = kRedisPasswordEnv;
  } else if (!file.empty()) {
    login.password = load_or_create_secret(file, [&]() -> std::string {
      fail("discovery.redis_password_file",
           "{} does not exist: write Redis's password into it (mode 0600), or set {}", file,
           kRedisPasswordEnv);
    });
    login.source = file;
    if (login.password.empty()) fail("discovery.redis_password_file", "{} is empty", file);
  }
  if (!login.user.empty() && login.password.empty()) {
    fail("discovery.redis_user", "'{}' needs a password: discovery.redis_password_file or {}",
         login.user.substr(0, 100), kRedisPasswordEnv);
  }
  return login;
}

}  // namespace

ServerOptions server_options(const Config& config, const std::filesystem::path& run_dir) {
  ServerOptions o;
  o.host = config.get<std::string>("discovery.host");
  o.port = port_setting(config, "discovery.port");
  const std::string dir = config.get<std::string>("discovery.data_dir");
  o.data_dir = dir.empty() ? run_dir : std::filesystem::path(dir);
  o.readers = config.get_list<std::string>("discovery.readers");
  for (size_t i = 0; i < o.readers.size(); ++i) {
    if (!is_node_address(o.readers[i])) {
      fail(fmt::format("discovery.readers[{}]", i),
           "'{}' is not an address (64 lowercase hex digits: the orchestrator's public key)",
           o.readers[i].substr(0, 100));
    }
  }
  if (o.readers.empty()) {
    fail("discovery.readers",
         "is empty, so no one could list the nodes: set it to the orchestrator's address (its "
         "public key, which `trellis orchestrator` logs as \"ledger kept by <address>\")");
  }
  o.limits.max_nodes_per_ip = config.get_at_least<int64_t>("discovery.max_nodes_per_ip", 1);
  o.limits.max_nodes = config.get_at_least<int64_t>("discovery.max_nodes", 1);
  o.limits.ttl_s = config.get_at_least<double>("discovery.ttl_s", 1);
  o.backend = config.get<std::string>("discovery.backend");
  if (o.backend != "sqlite" && o.backend != "redis") {
    fail("discovery.backend", "'{}' is not a backend: sqlite or redis", o.backend.substr(0, 100));
  }
  o.redis = config.get<std::string>("discovery.redis");
  o.redis_prefix = config.get<std::string>("discovery.redis_prefix");
  if (o.backend == "redis") o.redis_login = redis_login(config);
  o.trusted_proxies = trusted_proxies_setting(config, "discovery.trusted_proxies");
  return o;
}

std::unique_ptr<Store> open_store(const ServerOptions& o) {
  if (o.backend == "redis") {
    return std::make_unique<RedisStore>(o.redis, o.redis_prefix, o.name, o.limits, o.redis_login);
  }
  return std::make_unique<SqliteStore>(o.data_dir / "discovery.sqlite", o.name, o.limits);
}

struct Server::Impl {
  ServerOptions opt;
  std::unique_ptr<Store> store_owner;
  Store& store;
  NonceWindow nonces;
  httplib::Server svr;
  std::thread thread;
  std::string url;

  explicit Impl(ServerOptions o)
      : opt(std::move(o)),
        store_owner(open_store(opt)),
        store(*store_owner),
        nonces(opt.signature_window_s, kMaxNonces, kMaxNoncesPerAddress,
               static_cast<int64_t>(unix_seconds())) {
    routes();
  }

  httplib::Server::Handler guarded(HttpHandler fn) {
    return guarded_handler("discovery", std::move(fn));
  }

  // A call of the store. Its failure (Redis gone or refusing, a disk error) is the service's, not
  // the client's: logged in full for the operator, answered 503 without the details (the store's
  // address is nobody else's business).
  template <class F>
  auto stored(const char* what, F&& f) {
    try {
      return f();
    } catch (const Error& e) {
      log::error("discovery: the store failed ({}): {}", what, e.what());
      refuse(503, "store_unavailable", "the discovery store is unavailable; try again later");
    }
  }

  void routes() {
    svr.new_task_queue = [] { return new httplib::ThreadPool(8); };
    refuse_unbounded_bodies(svr, static_cast<size_t>(opt.max_request_bytes));
    svr.Get("/healthz",
            guarded([](const auto&, auto& res) { res.set_content("ok", "text/plain"); }));
    svr.Get("/status", guarded([this](const auto&, auto& res) {
              const int64_t live =
                  stored("status", [&] { return store.live_count(unix_seconds()); });
              reply_json(res, {{"id", store.id()}, {"nodes", live}});
            }));
    svr.Put(R"(/nodes/([^/]+))",
            guarded([this](const auto& req, auto& res) { publish(req, res); }));
    svr.Get("/nodes", guarded([this](const auto& req, auto& res) { list(req, res); }));
  }

  void publish(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "PUT /nodes/<address>";
    const std::string address = req.matches[1].str();
    if (!is_node_address(address)) {
      refuse(400, "malformed_request",
             fmt::format("'{}' is not a node address: 64 lowercase hex digits ({})",
                         address.substr(0, 100), where));
    }
    const std::string ip = client_ip(req, opt.trusted_proxies);
    const SignedHeaders h =
        require_signed_request(req, ip, store.id(), sha256_hex(req.body), nonces, where);
    if (h.signer != address) {
      refuse(403, "wrong_signer",
             fmt::format("{}: the request publishes node {} but is signed by {}", where, address,
                         h.signer));
    }
    const NodeMetadata m = parse_node_metadata(parse_json(req.body, where), address, where);
    switch (stored("publish",
                   [&] { return store.publish(m, ip, std::stoll(h.timestamp), unix_seconds()); })) {
      case Published::kPublished:
        break;
      case Published::kReplayed:
        refuse(401, "replayed",
               fmt::format("node {}: a newer publication is recorded (a replayed or reordered "
                           "request: sign a fresh one)",
                           address));
      case Published::kIpFull:
        refuse(429, "too_many_nodes",
               fmt::format("{} already has {} live nodes (discovery.max_nodes_per_ip)", ip,
                           opt.limits.max_nodes_per_ip));
      case Published::kServiceFull:
        refuse(503, "full",
               fmt::format("the service holds {} live nodes (discovery.max_nodes)",
                           opt.limits.max_nodes));
    }
    reply_json(res, {{"address", address}, {"ip", ip}, {"ttl_s", opt.limits.ttl_s}});
  }

  void list(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "GET /nodes";
    const SignedHeaders h = require_signed_request(req, client_ip(req, opt.trusted_proxies),
                                                   store.id(), sha256_hex(req.body), nonces, where);
    if (std::find(opt.readers.begin(), opt.readers.end(), h.signer) == opt.readers.end()) {
      refuse(403, "not_a_reader",
             fmt::format("{}: {} may not read node endpoints (discovery.readers lists the "
                         "orchestrator's key)",
                         where, h.signer));
    }
    Json nodes = Json::array();
    for (const DiscoveredNode& n : stored("list", [&] { return store.nodes(unix_seconds()); })) {
      Json j = to_json(n.metadata);
      j["ip"] = n.ip;
      j["first_seen"] = n.first_seen;
      j["last_seen"] = n.last_seen;
      nodes.push_back(std::move(j));
    }
    reply_json(res, {{"nodes", nodes}});
  }
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { stop(); }

int Server::start() {
  auto& m = *impl_;
  std::signal(SIGPIPE, SIG_IGN);
  const int port = m.opt.port == 0 ? m.svr.bind_to_any_port(m.opt.host)
                                   : (m.svr.bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1);
  if (port <= 0) {
    fail(fmt::format("{}:{}", m.opt.host, m.opt.port),
         "cannot listen on this address (in use, or not an address of this machine?)");
  }
  m.thread = std::thread([&m] { m.svr.listen_after_bind(); });
  m.url = fmt::format("http://{}:{}", m.opt.host, port);
  write_file_atomic(m.opt.data_dir / "discovery.url", m.url + "\n");
  log::info("discovery: {} listening on {} ({} store, {} reader{})", m.store.id(), m.url,
            m.opt.backend, m.opt.readers.size(), m.opt.readers.size() == 1 ? "" : "s");
  return port;
}

void Server::stop() {
  auto& m = *impl_;
  if (!m.thread.joinable()) return;
  m.svr.stop();
  m.thread.join();
  std::error_code ec;
  std::filesystem::remove(m.opt.data_dir / "discovery.url", ec);
}

std::string Server::url() const { return impl_->url; }
const std::string& Server::id() const { return impl_->store.id(); }

}  // namespace trellis::discovery
