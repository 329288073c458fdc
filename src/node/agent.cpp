#include "node/agent.h"

#include <httplib.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/http_limits.h"
#include "common/http_service.h"
#include "common/identity.h"
#include "common/logging.h"
#include "common/source_address.h"
#include "discovery/client.h"
#include "node/hardware.h"
#include "orchestrator/client.h"
#include "orchestrator/invite.h"
#include "run/child_process.h"

namespace trellis::node {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxRequestBytes = 16 << 10;  // an invite is well under 1 KiB
constexpr size_t kMaxUsedNonces = 4096;        // invites remembered as used (a replay is refused)
constexpr int64_t kMaxLogLines = 10'000;
constexpr double kQuickFailureS = 30;  // a task that fails sooner backs off longer
constexpr double kMaxBackoffS = 60;

// The `trellis` subcommand of a task's role, and the config keys naming its key and name.
struct RoleCommand {
  const char* command;
  const char* name_key;
  const char* key_file_key;  // nullptr: the role signs nothing
};

std::optional<RoleCommand> role_command(const std::string& role) {
  if (role == "worker") return RoleCommand{"infer", "infer.name", "infer.key_file"};
  if (role == "validator") return RoleCommand{"validate", "validator.name", "validator.key_file"};
  if (role == "relay") return RoleCommand{"relay", "relay.name", nullptr};
  return std::nullopt;
}

class Agent {
 public:
  Agent(const AgentOptions& o, const std::atomic<bool>& stop)
      : opt_(o),
        stop_(stop),
        key_file_(o.key_file.empty() ? o.data_dir / "node.key" : o.key_file),
        identity_(Identity::load_or_create(key_file_)),
        discovery_(o.discovery_url, 5),
        nonces_(60, 10'000, 1'000, static_cast<int64_t>(unix_seconds())) {
    fs::create_directories(opt_.data_dir / "logs");
    hardware_ = measure_hardware(opt_.data_dir);
    resume_membership();
    routes();
  }

  void run() {
    std::signal(SIGPIPE, SIG_IGN);
    const int port = opt_.port == 0 ? svr_.bind_to_any_port(opt_.host)
                                    : (svr_.bind_to_port(opt_.host, opt_.port) ? opt_.port : -1);
    if (port <= 0) {
      fail(fmt::format("{}:{}", opt_.host, opt_.port),
           "cannot listen on this address (in use, or not an address of this machine?)");
    }
    std::thread server([this] { svr_.listen_after_bind(); });
    endpoint_ =
        opt_.endpoint.empty() ? fmt::format("http://{}:{}", opt_.host, port) : opt_.endpoint;
    write_file_atomic(opt_.data_dir / "node.url", endpoint_ + "\n");
    log::info("node {} ({}): listening on {}; {} cores, {} MiB memory, {} GPU(s); publishing to {}",
              opt_.name, identity_.address(), endpoint_, hardware_.cpu_cores, hardware_.memory_mib,
              hardware_.gpus.size(), opt_.discovery_url);
    while (!stop_) {
      publish_when_due();
      join_when_invited();
      if (serving()) {
        beat_when_due();
        supervise();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    log::info("node {}: stop signal received, shutting down", opt_.name);
    stop_task("the agent is stopping");
    svr_.stop();
    server.join();
    fs::remove(opt_.data_dir / "node.url");
  }

 private:
  // --- discovery ---

  void publish_when_due() {
    if (unix_seconds() < next_publish_) return;
    discovery::NodeMetadata m{identity_.address(), endpoint_, hardware_, opt_.software_version};
    try {
      const double ttl = discovery_.publish(identity_, m);
      next_publish_ = unix_seconds() + std::max(0.05, ttl / 3);
    } catch (const Error& e) {
      warn_every_10s(fmt::format("cannot publish to discovery, retrying: {}", e.what()));
      next_publish_ = unix_seconds() + 2;
    }
  }

  // --- joining a pool ---

  bool serving() {
    std::lock_guard lock(mu_);
    return !orchestrator_url_.empty();
  }

  // Registers with the invite's nonce at the invite's orchestrator, and starts heartbeats. An
  // invite from the pool it serves means that pool counts it as gone (it was stopped, or cut off,
  // long enough to die there): it rejoins, and its task goes on.
  void join_when_invited() {
    std::optional<orchestrator::Invite> invite;
    {
      std::lock_guard lock(mu_);
      invite.swap(invite_);
    }
    if (!invite) return;
    try {
      orchestrator::Client(invite->orchestrator_url, "", 10)
          .register_node(identity_, invite->nonce);
    } catch (const Error& e) {
      log::warn("node {}: joining pool {} at {} failed: {}", opt_.name, invite->pool,
                invite->orchestrator_url, e.what());
      set_state("refused by pool " + invite->pool.substr(0, 40));
      return;
    }
    log::info("node {}: joined pool {} ({}) at {}", opt_.name, invite->pool, invite->domain,
              invite->orchestrator_url);
    if (serving() && issuer() != invite->issuer) stop_task("the node joined another pool");
    serve(invite->orchestrator_url, invite->pool, invite->issuer);
    write_file_atomic(membership_file(), Json{{"orchestrator_url", invite->orchestrator_url},
                                              {"pool", invite->pool},
                                              {"issuer", invite->issuer}}
                                             .dump());
  }

  void serve(const std::string& url, const std::string& pool, const std::string& issuer) {
    pool_client_.reset();
    std::lock_guard lock(mu_);
    orchestrator_url_ = url;
    pool_ = pool;
    issuer_ = issuer;
    state_ = "joined";
    next_beat_ = 0;
  }

  // The pool it served when it stopped (pool.json): a restarted agent sends heartbeats there at
  // once, rather than waiting to be counted dead and invited again; a refusal ends that.
  void resume_membership() {
    if (!fs::exists(membership_file())) return;
    try {
      const Json j = parse_json(read_file(membership_file()), membership_file().string());
      const auto url = json_required<std::string>(j, "orchestrator_url", "pool.json");
      const auto issuer = json_required<std::string>(j, "issuer", "pool.json");
      if (std::find(opt_.pools.begin(), opt_.pools.end(), issuer) == opt_.pools.end()) return;
      serve(url, json_required<std::string>(j, "pool", "pool.json"), issuer);
      log::info("node {}: resuming pool {} at {}", opt_.name, pool_, url);
    } catch (const Error& e) {
      log::warn("node {}: ignoring {}: {}", opt_.name, membership_file().string(), e.what());
    }
  }

  fs::path membership_file() const { return opt_.data_dir / "pool.json"; }

  std::string issuer() {
    std::lock_guard lock(mu_);
    return issuer_;
  }

  // --- heartbeats and tasks ---

  void beat_when_due() {
    if (unix_seconds() < next_beat_) return;
    std::string url, state;
    {
      std::lock_guard lock(mu_);
      url = orchestrator_url_;
      state = state_;
    }
    // One client per membership: it learns the run ID (what requests are signed for) once.
    if (!pool_client_) pool_client_ = std::make_unique<orchestrator::Client>(url, "", 5);
    orchestrator::Client::Beat beat;
    try {
      beat = pool_client_->heartbeat(identity_, state.substr(0, 64));
    } catch (const Error& e) {  // unreachable (restarting?): the task goes on meanwhile
      warn_every_10s(fmt::format("heartbeat failed, retrying: {}", e.what()));
      next_beat_ = unix_seconds() + 1;
      return;
    }
    if (!beat.refused.empty()) {
      log::warn("node {}: the orchestrator refused its heartbeat ({}): {}; waiting for an invite",
                opt_.name, beat.refused, beat.why);
      stop_task("the node left the pool");
      fs::remove(membership_file());
      std::lock_guard lock(mu_);
      orchestrator_url_.clear();
      pool_.clear();
      issuer_.clear();
      state_ = "waiting for an invite";
      return;
    }
    next_beat_ = unix_seconds() + std::max(0.05, beat.interval_s);
    if (!beat.task) {
      stop_task("the orchestrator withdrew its task");
      set_state("idle");
    } else if (task_id_ != beat.task->id) {
      if (child_) stop_task("its task changed");
      start_task(*beat.task, url);
    }
  }

  void start_task(const orchestrator::Task& task, const std::string& orchestrator_url) {
    const auto role = role_command(task.role);
    const fs::path dir = opt_.data_dir / "tasks" / std::to_string(task.id);
    try {
      if (!role) fail("task " + std::to_string(task.id), "unknown role '{}'", task.role);
      Config::defaults().merge_toml(task.config, "task " + std::to_string(task.id));
      fs::create_directories(dir);
      write_file_atomic(dir / "config.toml", task.config);
    } catch (const Error& e) {
      log::error("node {}: cannot run task {}: {}", opt_.name, task.id, e.what());
      task_id_ = task.id;  // not retried until the task changes
      set_state(fmt::format("bad task {}", task.id));
      return;
    }
    // The node's directory is the task's run directory: its policies and keys stay across
    // restarts; the node's key is the task's, so the pool sees one address.
    std::vector<std::string> argv = {opt_.trellis_binary.string(),
                                     role->command,
                                     (dir / "config.toml").string(),
                                     "--run-dir",
                                     opt_.data_dir.string(),
                                     "--set",
                                     Config::string_override("orchestrator.url", orchestrator_url),
                                     "--set",
                                     Config::string_override(role->name_key, opt_.name)};
    if (role->key_file_key) {
      argv.push_back("--set");
      argv.push_back(Config::string_override(role->key_file_key, key_file_.string()));
    }
    if (const std::string from = source_address(); !from.empty()) {  // the node's address
      argv.push_back("--set");
      argv.push_back(Config::string_override("network.source_address", from));
    }
    if (task.role == "relay") {
      argv.push_back("--set");
      argv.push_back(Config::string_override("relay.allowlist_url", orchestrator_url));
    }
    const fs::path log_file = opt_.data_dir / "logs" / fmt::format("task-{}.log", task.id);
    child_ = std::make_unique<run::ChildProcess>(task.role, argv, log_file);
    task_id_ = task.id;
    role_ = task.role;
    backoff_s_ = opt_.restart_backoff_s;
    restart_at_ = 0;
    {
      std::lock_guard lock(mu_);
      task_log_ = log_file;
      quick_failures_ = 0;
    }
    launch();
  }

  void launch() {
    try {
      child_->start();
      log::info("node {}: task {} ({}) started, pid {}, log {}", opt_.name, task_id_, role_,
                child_->pid(), child_->log().string());
      set_state(fmt::format("running {} task {}", role_, task_id_));
    } catch (const Error& e) {
      log::error("node {}: task {} cannot start: {}", opt_.name, task_id_, e.what());
      schedule_restart(1);
    }
  }

  // Restarts a task process that failed, after a backoff that doubles while it keeps failing
  // within kQuickFailureS of its start; one that exits 0 is done (its run completed).
  void supervise() {
    if (!child_) return;
    if (restart_at_ > 0) {
      if (unix_seconds() >= restart_at_) {
        restart_at_ = 0;
        ++restarts_;
        launch();
      }
      return;
    }
    if (!child_->started()) return;
    const auto status = child_->poll();
    if (!status || done_) return;
    if (*status == 0) {
      log::info("node {}: task {} ({}) finished", opt_.name, task_id_, role_);
      done_ = true;
      set_state(fmt::format("finished {} task {}", role_, task_id_));
      return;
    }
    log::warn("node {}: task {} ({}) exited with status {}; the end of {}:\n{}", opt_.name,
              task_id_, role_, *status, child_->log().string(), child_->log_tail(5));
    {
      std::lock_guard lock(mu_);
      quick_failures_ = child_->seconds_since_start() < kQuickFailureS ? quick_failures_ + 1 : 0;
      last_failure_ = fmt::format("task {} ({}) exited with status {}; its log: {}", task_id_,
                                  role_, *status, child_->log().string());
    }
    schedule_restart(child_->seconds_since_start());
  }

  void schedule_restart(double ran_s) {
    backoff_s_ =
        ran_s < kQuickFailureS ? std::min(kMaxBackoffS, backoff_s_ * 2) : opt_.restart_backoff_s;
    restart_at_ = unix_seconds() + backoff_s_;
    set_state(fmt::format("restarting {} task {}", role_, task_id_));
    log::info("node {}: restarting task {} in {:.1f} s", opt_.name, task_id_, backoff_s_);
  }

  void stop_task(const std::string& why) {
    if (child_ && child_->started() && !child_->poll()) {
      log::info("node {}: stopping task {} ({}): {}", opt_.name, task_id_, role_, why);
      child_->stop(10);
    }
    child_.reset();
    task_id_ = -1;
    done_ = false;
    restart_at_ = 0;
  }

  // --- the endpoint ---

  void routes() {
    svr_.new_task_queue = [] { return new httplib::ThreadPool(4); };
    svr_.set_read_timeout(5, 0);
    svr_.set_write_timeout(5, 0);
    refuse_unbounded_bodies(svr_, kMaxRequestBytes);
    svr_.Get("/healthz",
             guarded([](const auto&, auto& res) { res.set_content("ok", "text/plain"); }));
    svr_.Get("/status", guarded([this](const auto&, auto& res) {
               std::lock_guard lock(mu_);
               reply_json(res, {{"address", identity_.address()},
                                {"state", state_},
                                {"pool", pool_},
                                {"orchestrator_url", orchestrator_url_},
                                {"restarts", restarts_},
                                {"quick_failures", quick_failures_},
                                {"task_log", task_log_.string()},
                                {"last_failure", last_failure_}});
             }));
    svr_.Post("/invite", guarded([this](const auto& req, auto& res) { receive_invite(req, res); }));
    svr_.Get("/logs", guarded([this](const auto& req, auto& res) { send_logs(req, res); }));
  }

  httplib::Server::Handler guarded(HttpHandler fn) {
    return guarded_handler("node " + opt_.name, std::move(fn));
  }

  // POST /invite: accepted once, when for this node, from a pool it serves, signed, unexpired;
  // the main loop then registers with it.
  void receive_invite(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /invite";
    const orchestrator::Invite invite =
        orchestrator::parse_invite(parse_json(req.body, where), where);
    std::lock_guard lock(mu_);
    const std::string why = orchestrator::invite_problem(invite, identity_.address(),
                                                         static_cast<int64_t>(unix_seconds()),
                                                         opt_.pools, used_nonces_);
    if (!why.empty()) refuse(403, "refused", why);
    // One pool at a time; its own invite is a rejoin (it counts the node as gone).
    if (invite_ || (!orchestrator_url_.empty() && invite.issuer != issuer_)) {
      refuse(409, "busy",
             fmt::format("node {} serves pool {} already", identity_.address(),
                         invite_ ? invite_->pool : pool_));
    }
    // Only signed invites from its pools get here: dropping the oldest is rare, and cheap.
    if (used_nonces_.size() == kMaxUsedNonces) used_nonces_.erase(used_nonces_.begin());
    used_nonces_.push_back(invite.nonce);
    invite_ = invite;
    log::info("node {}: accepted an invite to pool {} from {}", opt_.name, invite.pool,
              invite.issuer);
    reply_json(res, {{"accepted", true}});
  }

  // GET /logs?lines=N, signed by a pool's key (for the node's address): the current task's log.
  void send_logs(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "GET /logs";
    const SignedHeaders h = require_signed_request(req, req.remote_addr, identity_.address(),
                                                   sha256_hex(req.body), nonces_, where);
    if (std::find(opt_.pools.begin(), opt_.pools.end(), h.signer) == opt_.pools.end())
      refuse(403, "not_a_pool",
             fmt::format("{}: {} is not a pool this node serves", where, h.signer));
    int64_t lines = 100;
    if (req.has_param("lines")) {
      try {
        lines = std::stoll(req.get_param_value("lines"));
      } catch (const std::exception&) {
        lines = -1;
      }
      if (lines < 1 || lines > kMaxLogLines)
        refuse(400, "malformed_request",
               fmt::format("{}: lines must be 1 to {}", where, kMaxLogLines));
    }
    fs::path file;
    {
      std::lock_guard lock(mu_);
      file = task_log_;
    }
    res.set_content(file.empty() ? "" : run::log_tail(file, lines), "text/plain");
  }

  // --- small helpers ---

  void set_state(std::string s) {
    std::lock_guard lock(mu_);
    state_ = std::move(s);
  }

  void warn_every_10s(const std::string& message) {
    if (unix_seconds() - last_warning_ < 10) return;
    last_warning_ = unix_seconds();
    log::warn("node {}: {}", opt_.name, message);
  }

  const AgentOptions& opt_;
  const std::atomic<bool>& stop_;
  fs::path key_file_;
  Identity identity_;
  discovery::Client discovery_;
  discovery::Hardware hardware_;
  NonceWindow nonces_;
  httplib::Server svr_;
  std::string endpoint_;
  double next_publish_ = 0, next_beat_ = 0, last_warning_ = -1e9;

  // Shared with the endpoint's threads.
  std::mutex mu_;
  std::optional<orchestrator::Invite> invite_;    // accepted, not yet used
  std::vector<std::string> used_nonces_;          // oldest first
  std::string orchestrator_url_, pool_, issuer_;  // "" while the node serves no pool
  std::string state_ = "waiting for an invite";
  fs::path task_log_;
  int64_t restarts_ = 0;
  int64_t quick_failures_ = 0;  // the task's failures in a row within kQuickFailureS of its start
  std::string last_failure_;

  // The main loop's only.
  std::unique_ptr<orchestrator::Client> pool_client_;  // of the pool it serves
  std::unique_ptr<run::ChildProcess> child_;
  int64_t task_id_ = -1;
  std::string role_;
  bool done_ = false;
  double backoff_s_ = 1, restart_at_ = 0;
};

}  // namespace

AgentOptions AgentOptions::from_config(const Config& config, const fs::path& run_dir) {
  AgentOptions o;
  o.name = config.get<std::string>("node.name");
  if (o.name.empty() || o.name.find('/') != std::string::npos || o.name == "." || o.name == "..")
    fail("node.name", "'{}' must be a non-empty name without '/'", o.name);
  const std::string data_dir = config.get<std::string>("node.data_dir");
  o.data_dir = data_dir.empty() ? run_dir / "nodes" / o.name : fs::path(data_dir);
  o.key_file = config.get<std::string>("node.key_file");
  o.host = config.get<std::string>("node.host");
  o.port = port_setting(config, "node.port");
  o.endpoint = config.get<std::string>("node.endpoint");
  o.discovery_url = config.get<std::string>("node.discovery_url");
  if (o.discovery_url.empty())
    fail("node.discovery_url", "the node needs a discovery service to publish itself to");
  o.pools = config.get_list<std::string>("node.pools");
  for (size_t i = 0; i < o.pools.size(); ++i) {
    if (!discovery::is_node_address(o.pools[i]))
      fail("node.pools",
           "element {} ('{}') is not an orchestrator address: 64 lowercase hex "
           "digits, the first log line of `trellis orchestrator`",
           i, o.pools[i].substr(0, 100));
  }
  if (o.pools.empty())
    log::warn("node.pools is empty: this node accepts no invite (list the pools it serves)");
  o.restart_backoff_s = config.get_at_least<double>("node.restart_backoff_s", 0.01);
  return o;
}

void run_agent(const AgentOptions& options, const std::atomic<bool>& stop) {
  Agent(options, stop).run();
}

}  // namespace trellis::node
