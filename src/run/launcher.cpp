#include "run/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "common/http_service.h"
#include "common/identity.h"
#include "common/json.h"
#include "common/logging.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"
#include "run/child_process.h"
#include "run/report.h"

namespace trellis::run {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// What the live view shows of metrics.jsonl: the newest step's metrics and the mean reward of
// the last 10 steps (single steps are noisy). Reread only when the file grows.
class MetricsTail {
 public:
  explicit MetricsTail(fs::path file) : file_(std::move(file)) {}

  void refresh() {
    std::error_code ec;
    const auto size = fs::file_size(file_, ec);
    if (ec || size == size_) return;
    size_ = size;
    std::string text;
    try {
      text = read_file(file_);
    } catch (const Error&) {
      return;
    }
    std::vector<double> rewards;
    size_t start = 0;
    for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
      try {  // a line being written is incomplete: skipped until the next refresh
        last_ = Json::parse(text.substr(start, end - start));
        if (last_.contains("reward/mean")) rewards.push_back(last_["reward/mean"].get<double>());
      } catch (const std::exception&) {
      }
    }
    const size_t n = std::min<size_t>(10, rewards.size());
    recent_reward_ = 0;
    for (size_t i = rewards.size() - n; i < rewards.size(); ++i) recent_reward_ += rewards[i] / n;
  }
  const Json& last() const { return last_; }  // null before the first step
  double recent_reward() const { return recent_reward_; }

 private:
  fs::path file_;
  uintmax_t size_ = 0;
  Json last_;
  double recent_reward_ = 0;
};

double number(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

// The pool's part of a live-view line: samples generated, trained and dropped unjudged (admission
// control keeps generated close to trained), the files by verdict, and the validation backlog in
// steps' worth; while workers are held back because the backlog reached its bound, that
// validators are behind and how fast they judge.
std::string pool_view(const orchestrator::Status& s, double trained) {
  const double batch = static_cast<double>(std::max<int64_t>(1, s.batch_size));
  const double backlog_steps = static_cast<double>(s.validating_samples) / batch;
  std::string out = fmt::format(
      "samples generated {} trained {:.0f} dropped {} | files accepted {} rejected {} validating "
      "{} | backlog {:.1f} steps",
      s.generated_samples, trained, s.dropped_samples, s.accepted, s.rejected, s.validating,
      backlog_steps);
  if (s.validators_behind) {
    out += fmt::format(
        " | validators behind: workers wait while {} samples wait for a verdict; validators judge "
        "{:.0f} samples/s (add some: run.validators)",
        s.validating_samples, s.judged_samples_per_s);
  }
  return out;
}

// The URL a role wrote to `file` once it listened (without the newline).
std::string read_url(const fs::path& file) {
  std::string url = read_file(file);
  while (!url.empty() && std::isspace(static_cast<unsigned char>(url.back()))) url.pop_back();
  return url;
}

// What a node agent says of itself (GET /status, node/agent.h); empty while it cannot be asked.
Json agent_status(const fs::path& node_dir) {
  std::string url;
  try {
    url = read_url(node_dir / "node.url");
  } catch (const Error&) {
    return Json();
  }
  const auto res = http_client(url, 1).Get("/status");
  if (!res || res->status != 200) return Json();
  try {
    return Json::parse(res->body);
  } catch (const std::exception&) {
    return Json();
  }
}

class Launcher {
  struct Relay {
    std::string name, upstream, url;
    int port = 0;  // 0 until the first start; a restart keeps it
    std::unique_ptr<ChildProcess> process;
  };
  struct Agent {
    std::string name;
    fs::path dir;  // <run dir>/nodes/<name>
    std::unique_ptr<ChildProcess> process;
    Json status;  // its newest GET /status
  };

 public:
  Launcher(const Config& config, const fs::path& run_dir, const LaunchOptions& options,
           const std::atomic<bool>& stop)
      : config_(config),
        run_dir_(run_dir),
        options_(options),
        stop_(stop),
        metrics_(run_dir / "metrics.jsonl") {
    workers_ = config.get_at_least<int64_t>("run.workers", 1);
    // Uploads wait for a validator's verdict: without one the run would never fill a step.
    if (config.get<bool>("orchestrator.validation")) {
      validators_ = config.get_at_least<int64_t>("run.validators", 0);
      if (validators_ == 0)
        fail("run.validators",
             "orchestrator.validation is on, so uploads wait for a validator: start at least one "
             "(run.validators = 1) or set orchestrator.validation = false");
    }
    steps_ = config.get<int64_t>("rl.steps");
    int64_t threads = config.get_at_least<int64_t>("compute.threads", 0);
    if (threads == 0) threads = std::max<int64_t>(1, ::sysconf(_SC_NPROCESSORS_ONLN));
    threads_per_role_ = std::max<int64_t>(1, threads / (workers_ + 1));
    data_dir_ = config.get<std::string>("orchestrator.data_dir");
    if (data_dir_.empty()) data_dir_ = run_dir;
    relays_ = config.get_at_least<int64_t>("shardcast.relays", 0);
    tree_ = config.get<std::string>("shardcast.tree");
    if (tree_ != "star" && tree_ != "chain")
      fail("shardcast.tree", "unknown relay tree '{}' (star | chain)", tree_);
    origin_dir_ = config.get<std::string>("shardcast.origin_dir");
    if (origin_dir_.empty()) origin_dir_ = run_dir / "shardcast" / "origin";
    // The orchestrator's key (it creates the same file): discovery lets it, and only it, read
    // node endpoints, and the agents accept its invites.
    keeper_ =
        Identity::load_or_create(orchestrator::keeper_key_file(
                                     config.get<std::string>("orchestrator.key_file"), data_dir_))
            .address();
    secrets_dir_ = orchestrator::secrets_dir(config, run_dir);
    // One machine may hold several runs: the orchestrator takes a free port (orchestrator.port
    // is ignored here) and keeps it across restarts.
  }

  int run() {
    start_discovery();
    start_orchestrator();
    trainer_ = role("trainer", {"trainer"});
    if (options_.resume) trainer_->argv().push_back("--resume");
    fs::remove(origin_dir_ / "origin.url");  // a crashed run's would name a dead port
    trainer_->start();
    const std::string origin = wait_for_url(*trainer_, origin_dir_ / "origin.url");
    start_relays(origin);
    std::string relay_urls;
    for (const auto& r : relays_list_)
      relay_urls += (relay_urls.empty() ? "\"" : ",\"") + r.url + "\"";
    if (relays_list_.empty()) relay_urls = "\"" + origin + "\"";
    create_tasks("[" + relay_urls + "]");
    // On loopback each agent connects from an address of its own (127.0.0.2, ...), as nodes on
    // different machines would: the orchestrator and the relays' allowlist tell them apart.
    const bool loopback = url_.starts_with("http://127.") || url_.starts_with("http://localhost");
    for (int64_t i = 0; i < workers_ + validators_; ++i) {
      Agent a;
      a.name = "node-" + std::to_string(i);
      a.dir = run_dir_ / "nodes" / a.name;
      std::vector<std::string> args = {"node",
                                       "--set",
                                       "node.name=" + a.name,
                                       "--set",
                                       "node.discovery_url=" + discovery_url_,
                                       "--set",
                                       "node.pools=[\"" + keeper_ + "\"]"};
      if (loopback && i < 250) {
        args.push_back("--set");
        args.push_back(
            Config::string_override("network.source_address", fmt::format("127.0.0.{}", i + 2)));
      }
      a.process = role(a.name, args);
      a.process->start();
      agents_.push_back(std::move(a));
    }
    std::printf(
        "run directory %s: orchestrator %s, trainer (origin %s), %lld relay%s (%s), discovery %s, "
        "%lld node agents for %lld worker%s and %lld validator%s (%lld thread%s each)\n",
        run_dir_.c_str(), url_.c_str(), origin.c_str(), static_cast<long long>(relays_),
        relays_ == 1 ? "" : "s", tree_.c_str(), discovery_url_.c_str(),
        static_cast<long long>(agents_.size()), static_cast<long long>(workers_),
        workers_ == 1 ? "" : "s", static_cast<long long>(validators_), validators_ == 1 ? "" : "s",
        static_cast<long long>(threads_per_role_), threads_per_role_ == 1 ? "" : "s");
    std::printf("dashboard %s/dashboard (any user name; the password is in %s)\n", url_.c_str(),
                (secrets_dir_ / "trainer.token").c_str());
    std::fflush(stdout);

    int trainer_status = -1;
    try {
      while (!stop_) {
        if (auto st = trainer_->poll()) {
          trainer_status = *st;
          break;
        }
        supervise();
        live_view();
        sleep_s(0.5);
      }
    } catch (const Error&) {
      shutdown(false);  // the agents stop their tasks first
      throw;
    }
    live_view(/*force=*/true);  // the last step
    if (stop_) std::printf("stopping (Ctrl-C)\n");
    shutdown(trainer_status == 0);
    if (trainer_status != 0 && !stop_) {
      std::fprintf(stderr, "the trainer exited with status %d; the end of %s:\n%s\n",
                   trainer_status, trainer_->log().c_str(), trainer_->log_tail(15).c_str());
    }
    write_report(run_dir_);
    std::printf("report: %s\n", (run_dir_ / "report.html").c_str());
    std::fflush(stdout);
    return stop_ ? 130 : trainer_status;
  }

 private:
  std::unique_ptr<ChildProcess> role(const std::string& name,
                                     const std::vector<std::string>& args) {
    // The role and its config first: CLI11's --set takes every value up to the next flag.
    std::vector<std::string> argv = {options_.trellis_binary.string(),
                                     args.front(),
                                     (run_dir_ / "config.toml").string(),
                                     "--run-dir",
                                     run_dir_.string(),
                                     "--set",
                                     "compute.threads=" + std::to_string(threads_per_role_)};
    argv.insert(argv.end(), args.begin() + 1, args.end());
    if (!url_.empty() && name != "orchestrator") {  // the orchestrator announces its own URL
      argv.push_back("--set");
      argv.push_back("orchestrator.url=" + url_);
    }
    return std::make_unique<ChildProcess>(name, argv, run_dir_ / "logs" / (name + ".log"));
  }

  // Starts (or restarts, on the same port) the discovery service the agents publish themselves
  // to, readable by the orchestrator's key only, and waits until it listens.
  void start_discovery() {
    const fs::path url_file = run_dir_ / "discovery.url";
    fs::remove(url_file);
    discovery_ = role("discovery", {"discovery", "--set", "discovery.data_dir=" + run_dir_.string(),
                                    "--set", "discovery.port=" + std::to_string(discovery_port_),
                                    "--set", "discovery.readers=[\"" + keeper_ + "\"]"});
    discovery_->start();
    discovery_url_ = wait_for_url(*discovery_, url_file);
    discovery_port_ = std::stoll(discovery_url_.substr(discovery_url_.rfind(':') + 1));
  }

  // The pool's tasks, once (a resumed run's orchestrator has them, held by the same agents): one
  // per worker and validator, each the run's config with the relays to fetch from; validators
  // also read the orchestrator's secrets (trusted: this machine).
  void create_tasks(const std::string& relay_urls) {
    orchestrator::Client owner(
        url_, orchestrator::client_token(config_, run_dir_, orchestrator::Role::kTrainer));
    if (!owner.tasks().empty()) return;
    const std::vector<std::string> common = {
        "shardcast.relay_urls=" + relay_urls,
        "compute.threads=" + std::to_string(threads_per_role_)};
    const Config worker = Config::resolve({run_dir_ / "config.toml"}, common);
    Config validator = worker;
    validator.set_string("orchestrator.secrets_dir", secrets_dir_.string());
    for (int64_t i = 0; i < workers_; ++i) owner.create_task("worker", worker.to_toml());
    for (int64_t i = 0; i < validators_; ++i) owner.create_task("validator", validator.to_toml());
  }

  // Starts (or restarts, on the same port) the orchestrator and waits until it listens.
  void start_orchestrator() {
    const fs::path url_file = data_dir_ / "orchestrator.url";
    fs::remove(url_file);
    orchestrator_ =
        role("orchestrator", {"orchestrator", "--set", "orchestrator.port=" + std::to_string(port_),
                              "--set", "orchestrator.discovery_url=" + discovery_url_,
                              // every node of the run is on this machine, at a loopback address
                              "--set", "orchestrator.invite_private_addresses=true"});
    orchestrator_->start();
    url_ = wait_for_url(*orchestrator_, url_file);
    port_ = std::stoll(url_.substr(url_.rfind(':') + 1));
  }

  // Waits until `child` has written its URL to `url_file` (it listens), and returns it.
  std::string wait_for_url(ChildProcess& child, const fs::path& url_file) {
    const auto t0 = Clock::now();
    while (!fs::exists(url_file)) {
      if (auto st = child.poll())
        fail(child.log().string(), "{} exited with status {}:\n{}", child.name(), *st,
             child.log_tail(10));
      if (seconds_since(t0) > 120)
        fail(child.log().string(), "{} did not start listening in 120 s", child.name());
      sleep_s(0.05);
    }
    return read_url(url_file);
  }

  // The relays: in a star every one pulls from the origin, in a chain each from the one before.
  // Each serves only the nodes the orchestrator lists as active.
  void start_relays(const std::string& origin) {
    for (int64_t i = 0; i < relays_; ++i) {
      Relay r;
      r.upstream = tree_ == "chain" && i > 0 ? relays_list_.back().url : origin;
      r.name = "relay-" + std::to_string(i);
      relays_list_.push_back(std::move(r));
      start_relay(relays_list_.back());
    }
  }

  // Starts (or restarts, on the same port) a relay and waits until it listens.
  void start_relay(Relay& r) {
    const fs::path url_file = run_dir_ / "shardcast" / r.name / "relay.url";
    fs::remove(url_file);
    r.process = role(r.name, {"relay", "--set", "relay.name=" + r.name, "--set",
                              "relay.port=" + std::to_string(r.port), "--set",
                              "relay.upstreams=[\"" + r.upstream + "\"]", "--set",
                              "relay.allowlist_url=" + url_});
    r.process->start();
    r.url = wait_for_url(*r.process, url_file);
    r.port = std::stoi(r.url.substr(r.url.rfind(':') + 1));
  }

  // A role that died is restarted (its state survives: the orchestrator's in SQLite, discovery's
  // in its store, an agent's in its directory); the count is reported. Agents restart their own
  // tasks; a task that fails 3 times in a row within 30 s of starting (a bad configuration, a
  // missing file) ends the run with its log's last lines, as a role that does so itself.
  void supervise() {
    if (auto st = discovery_->poll()) {
      check_crash_loop(*discovery_, *st);
      log::warn("discovery exited with status {}; restarting it on port {}", *st, discovery_port_);
      ++restarts_;
      start_discovery();
    }
    if (auto st = orchestrator_->poll()) {
      check_crash_loop(*orchestrator_, *st);
      log::warn("orchestrator exited with status {}; restarting it on port {}", *st, port_);
      ++restarts_;
      start_orchestrator();
    }
    for (auto& r : relays_list_) {
      if (auto st = r.process->poll()) {
        check_crash_loop(*r.process, *st);
        log::warn("{} exited with status {}; restarting it on port {}", r.name, *st, r.port);
        ++restarts_;
        start_relay(r);
      }
    }
    for (auto& a : agents_) {
      if (auto st = a.process->poll()) {
        check_crash_loop(*a.process, *st);
        log::warn("{} exited with status {}; restarting it", a.name, *st);
        ++restarts_;
        a.process->start();
      }
    }
    if (seconds_since(last_agent_poll_) < 2) return;
    last_agent_poll_ = Clock::now();
    for (auto& a : agents_) {
      a.status = agent_status(a.dir);
      if (!a.status.is_object() || a.status.value("quick_failures", int64_t{0}) < 3) continue;
      const fs::path log = a.status.value("task_log", std::string());
      fail(log.string(),
           "{} on {}, 3 times in a row within 30 s of starting; the end of its log:\n{}",
           a.status.value("last_failure", std::string()), a.name, log_tail(log, 10));
    }
  }

  void check_crash_loop(const ChildProcess& child, int status) {
    int& failures = quick_failures_[child.name()];
    failures = child.seconds_since_start() < 30 ? failures + 1 : 0;
    if (failures >= 3)
      fail(child.log().string(),
           "{} exited with status {} {} times in a row within 30 s of starting; the end of its "
           "log:\n{}",
           child.name(), status, failures, child.log_tail(10));
  }

  // One line when the trainer logged a new step (at most every 2 s; every 30 s while waiting),
  // or now when `force`.
  void live_view(bool force = false) {
    if (!force && seconds_since(last_view_) < 2) return;
    last_view_ = Clock::now();
    metrics_.refresh();
    const Json& m = metrics_.last();
    const int64_t step = m.is_object() ? m.value("step", int64_t{-1}) : -1;
    orchestrator::Status s;
    try {
      s = orchestrator::Client(url_, "", 2).status();
    } catch (const Error&) {
      return;  // restarting
    }
    if (step == last_step_ && (force || seconds_since(last_line_) < 30)) return;
    last_step_ = step;
    last_line_ = Clock::now();
    int64_t running = 0;  // agents running their task
    for (auto& a : agents_)
      running +=
          a.status.is_object() && a.status.value("state", std::string()).rfind("running", 0) == 0;
    const std::string pool = pool_view(s, number(m, "samples/trained"));
    if (step < 0) {
      std::printf(
          "waiting for step 0 | counter %lld | version %lld | %s | nodes running %lld/%lld\n",
          static_cast<long long>(s.step), static_cast<long long>(s.policy_version), pool.c_str(),
          static_cast<long long>(running), static_cast<long long>(agents_.size()));
    } else {
      std::printf(
          "step %lld/%lld | reward %.3f | 10-step mean %.3f | len %.1f | stale %.1f | rollout "
          "%.0f tok/s | trainer idle %.0f%% | %s%s | nodes running %lld/%lld%s\n",
          static_cast<long long>(step), static_cast<long long>(steps_), number(m, "reward/mean"),
          metrics_.recent_reward(), number(m, "seq_len/mean"), number(m, "staleness/mean"),
          s.rollout_tokens_per_s, 100 * number(m, "trainer/idle_frac"), pool.c_str(),
          broadcast_view(m).c_str(), static_cast<long long>(running),
          static_cast<long long>(agents_.size()),
          restarts_ > 0 ? fmt::format(" | restarts {}", restarts_).c_str() : "");
    }
    std::fflush(stdout);
  }

  // " | version 12: 1.3 MB of 48.2 MB", the last version's broadcast, when the trainer logged it.
  static std::string broadcast_view(const Json& m) {
    if (!m.is_object() || !m.contains("broadcast/full_bytes")) return "";
    return fmt::format(" | version {}: {:.1f} of {:.1f} MB", number(m, "broadcast/version"),
                       number(m, "broadcast/bytes") / 1e6, number(m, "broadcast/full_bytes") / 1e6);
  }

  // The agents first (each stops its task; workers have exited on their own once the run is
  // done), then the trainer and the relays, then the orchestrator, which must outlive every
  // upload and verdict, and discovery.
  void shutdown(bool completed) {
    for (auto& a : agents_)  // all at once: each waits for its task
      if (a.process->running()) ::kill(a.process->pid(), SIGTERM);
    for (auto& a : agents_) a.process->stop(completed ? 20 : 15);
    trainer_->stop(30);
    for (auto& r : relays_list_) r.process->stop(5);
    orchestrator_->stop(10);
    discovery_->stop(5);
  }

  Config config_;
  fs::path run_dir_, data_dir_, origin_dir_, secrets_dir_;
  std::string tree_, keeper_, discovery_url_;
  int64_t discovery_port_ = 0;
  int64_t relays_ = 0;
  std::vector<Relay> relays_list_;
  LaunchOptions options_;
  const std::atomic<bool>& stop_;
  int64_t workers_ = 1, validators_ = 0, steps_ = 0, threads_per_role_ = 1, port_ = 0,
          restarts_ = 0;
  std::map<std::string, int> quick_failures_;  // consecutive early exits, by role
  std::string url_;
  std::unique_ptr<ChildProcess> discovery_, orchestrator_, trainer_;
  std::vector<Agent> agents_;
  Clock::time_point last_agent_poll_{};
  MetricsTail metrics_;
  Clock::time_point last_view_{}, last_line_{};
  int64_t last_step_ = -2;
};

}  // namespace

int launch_run(const Config& config, const fs::path& run_dir, const LaunchOptions& options,
               const std::atomic<bool>& stop) {
  return Launcher(config, run_dir, options, stop).run();
}

}  // namespace trellis::run
