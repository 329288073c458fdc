// End-to-end tests of the decoupled pipeline as `trellis run` starts it: an orchestrator, a
// trainer and two inference workers as separate processes on loopback, meeting only through
// HTTP, signed Parquet rollout files and the policy directory. A short run leaves the run
// directory the docs describe; a run whose worker and orchestrator are killed (SIGKILL) mid-run
// is restarted by the launcher, loses no accepted rollout, and completes; a C3PO++ worker fills
// the steps with groups that name their draws; a worker that cannot start ends the run with its
// error. A swarm of node agents (discovery, invites, heartbeats, tasks) trains the same way, on
// SQLite and on Redis discovery, through a stopped agent and a killed task.
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "cli/trellis_process.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/identity.h"
#include "common/json.h"
#include "error_of.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"
#include "orchestrator/state.h"
#include "redis_process.h"
#include "rollout/data_sampling.h"
#include "rollout/rollout_file.h"
#include "shardcast/manifest.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

class Pipeline : public ::testing::Test {
 public:  // for run_swarm too
  static void SetUpTestSuite() {
    dir_ = fresh_dir("pipeline");
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // A warm start with signal: the tiny model after a short SFT on reverse_text (random weights
  // would never end an answer, so every group would score 0 and no step would fill).
  static fs::path warm_start() {
    const fs::path warm = dir_ / "warm";
    if (fs::exists(warm / "config.json")) return warm;
    auto r = run_trellis("model init --preset tiny --seed 1 --out " + (dir_ / "base").string());
    EXPECT_EQ(r.status, 0) << r.output;
    r = run_trellis("sft " + example() + " --set sft.steps=150 --set sft.eval_tasks=0" +
                    " --set compute.threads=1 --set model.path=" + (dir_ / "base").string() +
                    " --set sft.out=" + warm.string() + " --run-dir " + (dir_ / "sft").string());
    EXPECT_EQ(r.status, 0) << r.output;
    return warm;
  }
  static std::string example() {
    return std::string(TRELLIS_SOURCE_DIR) + "/examples/quickstart.toml";
  }
  // `trellis run` on the quickstart's config, shrunk: 64 samples per step in files of 2 groups.
  static std::string run_args(const fs::path& run_dir, int steps) {
    return "run " + example() + " --set model.path=" + warm_start().string() +
           " --set rl.steps=" + std::to_string(steps) +
           " --set rl.batch_size=64 --set infer.groups_per_submission=2 --set infer.poll_s=0.1" +
           " --set trainer.checkpoint_every=2 --run-dir " + run_dir.string();
  }
  static int metric_lines(const fs::path& run_dir) {
    try {
      return static_cast<int>(read_jsonl(run_dir / "metrics.jsonl").size());
    } catch (const std::exception&) {
      return 0;  // not written yet, or a line mid-write
    }
  }
  // The operator's client of the run in `run_dir` (the trainer's token it created).
  static orchestrator::Client operator_client(const fs::path& run_dir) {
    return orchestrator::Client(
        url_of(run_dir),
        orchestrator::client_token(Config::defaults(), run_dir, orchestrator::Role::kTrainer));
  }
  // The accepted files of steps [0, steps) as the run's orchestrator lists them.
  static std::set<std::string> accepted(const fs::path& run_dir, int steps) {
    orchestrator::Client client = operator_client(run_dir);
    std::set<std::string> names;
    for (int s = 0; s < steps; ++s)
      for (const auto& f : client.accepted(s))
        names.insert(fmt::format("step_{}/{} {}", s, f.name, f.sha256));
    return names;
  }
  // The work units `trellis ledger contributions` credits each node of `run_dir` with, checked
  // to equal the completion tokens the orchestrator accepted from it.
  static std::map<std::string, int64_t> credited_as_accepted(const fs::path& run_dir,
                                                             orchestrator::State& state) {
    std::map<std::string, int64_t> accepted_tokens, credited;
    for (const auto& sub : state.submissions("accepted"))
      accepted_tokens[sub.key.node_address] += sub.counts.completion_tokens;
    const auto sums = run_trellis("ledger contributions --json " + run_dir.string(), false);
    EXPECT_EQ(sums.status, 0) << sums.output;
    for (const auto& line : split_lines(sums.output)) {
      const Json row = Json::parse(line);
      if (row["work_units"].get<int64_t>() > 0) credited[row["node"]] = row["work_units"];
    }
    EXPECT_EQ(credited, accepted_tokens);
    return credited;
  }
  // The log of the node agents' task `id` in `run_dir` ("" when no agent ran it).
  static std::string task_log(const fs::path& run_dir, int id) {
    std::string log;
    for (const auto& node : fs::directory_iterator(run_dir / "nodes")) {
      const fs::path file = node.path() / "logs" / fmt::format("task-{}.log", id);
      if (fs::exists(file)) log += read_file(file);
    }
    return log;
  }
  static std::string url_of(const fs::path& run_dir) {
    return read_url(run_dir / "orchestrator.url");
  }
  // The binary as a command line starts with: TRELLIS_BIN for the processes a test starts, and
  // for the roles `trellis run` starts, its own path with symlinks resolved (/proc/self/exe).
  static std::string binaries() {
    return "(" + std::string(TRELLIS_BIN) + "|" + fs::canonical(TRELLIS_BIN).string() + ")";
  }
  // `signal` (KILL, TERM) to the `trellis` processes whose arguments match `pattern` (a regex).
  // Anchored at the binary, so neither the shell that runs pkill nor the one that popen started
  // a command in (both hold the text in their own command lines) matches.
  static void kill_matching(const std::string& pattern, const std::string& signal = "KILL") {
    const std::string regex = "^" + binaries() + " " + pattern;
    ASSERT_EQ(std::system(("pkill -" + signal + " -f " + quoted(regex)).c_str()), 0)
        << "no process matched " << pattern;
  }

  static fs::path dir_;
};
fs::path Pipeline::dir_;

TEST_F(Pipeline, RunTrainsAcrossProcessesAndLeavesTheRunDirectory) {
  const fs::path run_dir = dir_ / "short";
  const int steps = 4;
  // The trainer as 2 ranks (docs/distributed.md), as a user with a second core would run it.
  const auto r = run_trellis(run_args(run_dir, steps) + " --set trainer.nproc=2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "2 workers");
  EXPECT_CONTAINS(r.output, "1 validator");
  EXPECT_CONTAINS(r.output, "validating");
  EXPECT_CONTAINS(r.output, "report: " + (run_dir / "report.html").string());

  // Every step trained on a full batch, with staleness within the async window and the trainer's
  // idle time reported.
  const auto rows = read_jsonl(run_dir / "metrics.jsonl");
  ASSERT_EQ(rows.size(), static_cast<size_t>(steps));
  for (int s = 0; s < steps; ++s) {
    EXPECT_EQ(rows[s]["step"], s);
    EXPECT_EQ(rows[s]["samples"].get<double>(), 64);
    EXPECT_LE(rows[s]["staleness/max"].get<double>(), 2);  // rl.async_level
    EXPECT_GE(rows[s]["trainer/idle_frac"].get<double>(), 0);
    EXPECT_LE(rows[s]["trainer/idle_frac"].get<double>(), 1);
    EXPECT_TRUE(rows[s].contains("loss") && rows[s].contains("mismatch/k3"));
  }

  // The run directory: resolved config, one log per role, checkpoints, the published policies,
  // the rollout files (our reader and the spec's layout), the report.
  EXPECT_TRUE(fs::exists(run_dir / "config.toml"));
  for (const char* role :
       {"discovery", "orchestrator", "trainer", "relay-0", "node-0", "node-1", "node-2"})
    EXPECT_TRUE(fs::exists(run_dir / "logs" / (std::string(role) + ".log"))) << role;
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step_4" / "optimizer" / "index.json"));
  EXPECT_TRUE(
      fs::exists(run_dir / "checkpoints" / "step_4" / "optimizer" / "shard-1-of-2.safetensors"));
  EXPECT_CONTAINS(read_file(run_dir / "rank-1.log"), "rank 1 of 2");
  // Policies went out through SHARDCAST: the origin published every version (signed), the relay
  // pulled them, and the workers fetched verified copies.
  const auto origin = shardcast::read_manifest(run_dir / "shardcast" / "origin");
  ASSERT_NE(origin.newest(), nullptr);
  EXPECT_EQ(origin.newest()->version, steps);
  const std::string trainer_key =
      Identity::load_or_create(run_dir / "keys" / "trainer.key").address();
  for (const auto& v : origin.versions) EXPECT_TRUE(v.signed_by(trainer_key)) << v.version;
  EXPECT_FALSE(shardcast::read_manifest(run_dir / "shardcast" / "relay-0").versions.empty());
  // The roles ran as the node agents' tasks (1 and 2 the workers, 3 the validator), each agent
  // invited through discovery.
  for (int task = 1; task <= 3; ++task) EXPECT_FALSE(task_log(run_dir, task).empty()) << task;
  for (int worker : {1, 2}) EXPECT_CONTAINS(task_log(run_dir, worker), "fetched policy version");
  for (const char* node : {"node-0", "node-1", "node-2"})
    EXPECT_CONTAINS(read_file(run_dir / "logs" / (std::string(node) + ".log")), "joined pool");
  // The validator judged every file the trainer used, honest workers were never rejected, and
  // the report plots what was decided.
  EXPECT_CONTAINS(task_log(run_dir, 3), "accepted step 0 submission");
  for (const auto& row : rows) {
    EXPECT_GE(row["submissions/accepted"].get<double>(), 4);
    EXPECT_EQ(row["submissions/rejected"].get<double>(), 0);
  }
  const std::string report = read_file(run_dir / "report.html");
  EXPECT_CONTAINS(report, "<svg");
  EXPECT_CONTAINS(report, "plot-submissions");
  EXPECT_CONTAINS(report, "plot-samples");
  EXPECT_CONTAINS(report, "plot-validation");

  // Admission control, from the run's own counts (the orchestrator's record of every file and
  // the trainer's batches): workers generated at most 1.3x the samples trained, and at no moment
  // did more than two steps' worth wait for a verdict.
  orchestrator::State state(run_dir / "orchestrator.sqlite", "",
                            Identity::load_or_create(run_dir / "keys" / "orchestrator.key"));
  int64_t generated = 0;
  std::vector<std::pair<double, int64_t>> backlog_changes;  // (time, +/- samples)
  for (const auto& sub : state.submissions()) {
    generated += sub.counts.samples;
    if (sub.uploaded_at > 0 && sub.status != "validating") {  // waited from upload to decision
      backlog_changes.emplace_back(sub.uploaded_at, sub.counts.samples);
      backlog_changes.emplace_back(sub.decided_at, -sub.counts.samples);
    }
  }
  std::sort(backlog_changes.begin(), backlog_changes.end());  // a decision before an upload
  int64_t backlog = 0, max_backlog = 0;
  for (const auto& [t, n] : backlog_changes) max_backlog = std::max(max_backlog, backlog += n);
  const double trained = rows.back()["samples/trained"].get<double>();
  EXPECT_EQ(trained, steps * 64);
  EXPECT_LE(static_cast<double>(generated), 1.3 * trained);
  EXPECT_GE(rows.back()["samples/generated"].get<double>(), trained);
  EXPECT_LE(max_backlog, 2 * 64);  // orchestrator.max_backlog_steps x rl.batch_size
  std::set<std::string> nodes;
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(run_dir / "rollouts")) {
    if (entry.path().extension() != ".parquet") continue;
    std::string bytes;
    const auto file = rollout::read_rollout_file(entry.path().string(), bytes);
    ASSERT_FALSE(file.rows.empty()) << entry.path();
    const auto& row = file.rows.front();
    EXPECT_EQ(entry.path().filename().string(),
              fmt::format("{}-{}.parquet", row.node_address, row.submission));
    EXPECT_EQ(entry.path().parent_path().filename().string(), fmt::format("step_{}", row.step));
    EXPECT_TRUE(file.rows.size() == 8u || file.rows.size() == 16u)  // 1 or 2 groups of 8
        << file.rows.size();
    // Every completion carries its TOPLOC proof: one 258-byte chunk proof per 32 committed rows.
    for (const auto& r : file.rows) {
      const size_t committed = r.completion_tokens.empty() ? 0 : r.completion_tokens.size() - 1;
      EXPECT_EQ(r.proof.size(), (committed + 31) / 32 * 258) << entry.path();
    }
    nodes.insert(row.node_address);
    ++files;
  }
  EXPECT_GE(files, 2 * steps);  // at least 64 samples per step, in files of 16
  EXPECT_EQ(nodes.size(), 2u) << "both workers contributed";

  // The run's ledger verifies, kept by the orchestrator's key, and credits each node with
  // exactly the completion tokens the orchestrator accepted from it.
  const std::string keeper =
      Identity::load_or_create(run_dir / "keys" / "orchestrator.key").address();
  const auto verified = run_trellis("ledger verify " + run_dir.string() + " --keeper " + keeper);
  ASSERT_EQ(verified.status, 0) << verified.output;
  EXPECT_CONTAINS(verified.output, "entries verify");
  EXPECT_EQ(credited_as_accepted(run_dir, state).size(), 2u);
  // The validator's verdicts are its own statements on the ledger.
  const auto verdicts = run_trellis("ledger show --json --kind verdict " + run_dir.string(), false);
  ASSERT_EQ(verdicts.status, 0);
  const auto verdict_lines = split_lines(verdicts.output);
  ASSERT_FALSE(verdict_lines.empty());
  for (const auto& line : verdict_lines) EXPECT_NE(Json::parse(line)["author"], keeper) << line;
}

// C3PO++ workers (infer.partial_rollouts): every step fills, every group names the draw its
// prompt came from, and every token was sampled within the async window.
TEST_F(Pipeline, PartialRolloutWorkerFillsEveryStepWithGroupsNamingTheirDraws) {
  const fs::path run_dir = dir_ / "partial";
  const int steps = 3;
  const auto r = run_trellis(run_args(run_dir, steps) +
                             " --set run.workers=1 --set infer.partial_rollouts=true" +
                             " --set infer.token_budget=64");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto rows = read_jsonl(run_dir / "metrics.jsonl");
  ASSERT_EQ(rows.size(), static_cast<size_t>(steps));
  for (const auto& row : rows) EXPECT_EQ(row["samples"].get<double>(), 64);
  EXPECT_CONTAINS(task_log(run_dir, 1), "C3PO++ partial rollouts");
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(run_dir / "rollouts")) {
    if (entry.path().extension() != ".parquet") continue;
    std::string bytes;
    for (const auto& row : rollout::read_rollout_file(entry.path().string(), bytes).rows) {
      const auto draw = rollout::parse_drawn_task_id(row.task_id);
      ASSERT_TRUE(draw) << row.task_id;
      EXPECT_LE(draw->second.step, row.step) << row.task_id;
      for (int32_t v : row.token_versions) {
        EXPECT_GE(v, row.step - 2);  // rl.async_level
        EXPECT_LE(v, row.step);
      }
    }
    ++files;
  }
  EXPECT_GE(files, 2 * steps);
}

// An FP8 run (rl.precision = fp8, docs/fp8.md): the trainer publishes FP8 policy versions, the
// worker rolls out in FP8, and the validator, recomputing in FP8 under [validator.fp8], accepts
// every honest file (under the bf16 thresholds it rejected one and evicted its worker).
TEST_F(Pipeline, AnFp8RunAcceptsEveryHonestFile) {
  const fs::path run_dir = dir_ / "fp8";
  const int steps = 2;
  const auto r =
      run_trellis(run_args(run_dir, steps) + " --set run.workers=1 --set rl.precision=fp8");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto rows = read_jsonl(run_dir / "metrics.jsonl");
  ASSERT_EQ(rows.size(), static_cast<size_t>(steps));
  for (const auto& row : rows) {
    EXPECT_EQ(row["samples"].get<double>(), 64);
    EXPECT_GE(row["submissions/accepted"].get<double>(), 4);
    EXPECT_EQ(row["submissions/rejected"].get<double>(), 0);
  }
  EXPECT_CONTAINS(read_file(run_dir / "logs" / "trainer.log"), "fp8");
}

TEST_F(Pipeline, KilledWorkerAndOrchestratorLoseNoAcceptedRolloutAndTheRunCompletes) {
  const fs::path run_dir = dir_ / "killed";
  const int steps = 20;  // long enough that both kills land mid-run
  auto launcher =
      std::async(std::launch::async, [&] { return run_trellis(run_args(run_dir, steps)); });
  ASSERT_TRUE(wait_for([&] { return metric_lines(run_dir) >= 2; }, 600)) << "no progress";
  const auto before = accepted(run_dir, steps);
  ASSERT_FALSE(before.empty());

  kill_matching("infer " + (run_dir / "nodes").string() + "/node-[0-9]/tasks/1/config.toml");
  ASSERT_TRUE(wait_for([&] { return metric_lines(run_dir) >= 4; }, 600)) << "no progress";
  kill_matching("orchestrator " + (run_dir / "config.toml").string() + " .*orchestrator.port=");
  kill_matching("relay " + (run_dir / "config.toml").string() + " .*relay.name=relay-0");
  kill_matching("node " + (run_dir / "config.toml").string() + " .*node.name=node-2");
  const auto r = launcher.get();
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "orchestrator exited");
  EXPECT_CONTAINS(r.output, "relay-0 exited");
  EXPECT_CONTAINS(r.output, "node-2 exited");
  std::string agents;
  for (const char* node : {"node-0", "node-1", "node-2"})
    agents += read_file(run_dir / "logs" / (std::string(node) + ".log"));
  EXPECT_CONTAINS(agents, "task 1 (worker) exited with status 137");  // restarted by its agent
  EXPECT_CONTAINS(agents, "resuming pool");  // the restarted agent went on heartbeating
  const auto rows = read_jsonl(run_dir / "metrics.jsonl");
  ASSERT_EQ(rows.size(), static_cast<size_t>(steps));
  for (const auto& row : rows) EXPECT_EQ(row["samples"].get<double>(), 64);

  // The orchestrator's state survived: restarted on the run directory, it still lists every
  // file it had accepted before the kills, with the same hashes, and serves their bytes.
  const fs::path url_file = run_dir / "orchestrator.url";
  fs::remove(url_file);
  auto orchestrator = std::async(std::launch::async, [&] {
    return run_trellis("orchestrator " + (run_dir / "config.toml").string() + " --run-dir " +
                       run_dir.string() + " --set orchestrator.port=0");
  });
  ASSERT_TRUE(wait_for([&] { return fs::exists(url_file); }, 60));
  const auto after = accepted(run_dir, steps);
  for (const auto& f : before) EXPECT_TRUE(after.count(f)) << f << " was lost";
  orchestrator::Client client = operator_client(run_dir);
  const auto first = client.accepted(0).front();
  EXPECT_EQ(sha256_hex(client.download(0, first)), first.sha256);
  kill_matching("orchestrator " + (run_dir / "config.toml").string(), "TERM");
  EXPECT_EQ(orchestrator.get().status, 0) << "a clean shutdown on SIGTERM";
}

// The processes whose parent is `pid` (from /proc/<p>/stat's fourth field).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat;
    try {
      stat = read_file(e.path() / "stat");
    } catch (const std::exception&) {
      continue;  // gone meanwhile
    }
    std::istringstream in(stat.substr(stat.rfind(')') + 2));
    std::string state;
    pid_t parent = 0;
    in >> state >> parent;
    if (parent == pid) out.push_back(std::stoi(name));
  }
  return out;
}

// The swarm of specs/protocol.md on loopback: discovery, an orchestrator that invites what it
// finds there, a trainer and a relay, and three node agents that know only discovery and the
// orchestrator's key. They are invited, send heartbeats and pull two worker tasks and a validator
// task; training proceeds. A worker task killed with SIGKILL is restarted by its agent and loads
// its policy from the agent's weights cache. An agent stopped with SIGSTOP is Unhealthy after 3
// missed heartbeats and Dead after 6: refused work, and off the relay's allowlist (each agent
// connects from its own loopback address); after SIGCONT it is invited again and rejoins.
// The ledger verifies, names an entry edited with sqlite3, records the stopped node's two invites
// and credits each node with the tokens the orchestrator accepted from it.
void run_swarm(const fs::path& dir, const fs::path& warm, bool redis) {
  const fs::path run_dir = dir / (redis ? "swarm-redis" : "swarm-sqlite");
  fs::create_directories(run_dir);
  const std::string keeper =
      Identity::load_or_create(run_dir / "keys" / "orchestrator.key").address();
  const int steps = 16;
  Config config = Config::resolve(
      {std::string(TRELLIS_SOURCE_DIR) + "/examples/quickstart.toml"},
      {"model.path=" + warm.string(), "rl.steps=" + std::to_string(steps), "rl.batch_size=64",
       "infer.groups_per_submission=2", "infer.poll_s=0.1", "compute.threads=1",
       "orchestrator.port=0", "orchestrator.heartbeat_s=0.5", "orchestrator.unhealthy_after=3",
       "orchestrator.dead_after=6", "orchestrator.invite_sweep_s=0.3",
       "orchestrator.invite_ttl_s=5", "discovery.port=0", "discovery.readers=[\"" + keeper + "\"]",
       "node.pools=[\"" + keeper + "\"]", "relay.port=0", "relay.name=relay-0"});
  std::optional<RedisProcess> redis_server;
  if (redis) {
    redis_server.emplace(run_dir / "redis");
    config.set_string("discovery.backend", "redis");
    config.set_string("discovery.redis", redis_server->address());
  }
  const std::string cfg = (run_dir / "config.toml").string();
  write_file_atomic(cfg, config.to_toml());
  const auto url_in = [](const fs::path& file) {
    EXPECT_TRUE(wait_for([&] { return fs::exists(file); }, 60)) << file;
    std::string url = fs::exists(file) ? read_file(file) : "";
    while (!url.empty() && std::isspace(static_cast<unsigned char>(url.back()))) url.pop_back();
    return url;
  };
  TrellisProcess discovery({"discovery", cfg, "--run-dir", run_dir.string()});
  const std::string discovery_url = url_in(run_dir / "discovery.url");
  TrellisProcess orchestrator({"orchestrator", cfg, "--run-dir", run_dir.string(), "--set",
                               "orchestrator.discovery_url=" + discovery_url, "--set",
                               "orchestrator.invite_private_addresses=true"});
  const std::string url = url_in(run_dir / "orchestrator.url");
  TrellisProcess trainer(
      {"trainer", cfg, "--run-dir", run_dir.string(), "--set", "orchestrator.url=" + url});
  const std::string origin = url_in(run_dir / "shardcast" / "origin" / "origin.url");
  TrellisProcess relay({"relay", cfg, "--run-dir", run_dir.string(), "--set",
                        "relay.upstreams=[\"" + origin + "\"]", "--set",
                        "relay.allowlist_url=" + url});
  const std::string relay_url = url_in(run_dir / "shardcast" / "relay-0" / "relay.url");
  // Each agent (and its tasks) connects from an address of its own, as on three machines.
  std::vector<std::unique_ptr<TrellisProcess>> agents;
  std::vector<std::string> ip;
  for (int i = 0; i < 3; ++i) {
    ip.push_back("127.0.0." + std::to_string(10 + i));
    agents.push_back(std::make_unique<TrellisProcess>(std::vector<std::string>{
        "node", cfg, "--run-dir", run_dir.string(), "--set", "node.name=node-" + std::to_string(i),
        "--set", "node.discovery_url=" + discovery_url, "--set",
        "network.source_address=" + ip.back()}));
  }
  // What the relay answers a request from `from`: 200 while that address is on its allowlist.
  const auto relay_answers = [&](const std::string& from) {
    httplib::Client c(relay_url);
    c.set_interface(from);
    const auto res = c.Get("/manifest.json");
    return res ? res->status : 0;
  };

  // The pool owner's tasks: the run's config, with the relay to fetch from and the secrets of a
  // validator (trusted: the owner's machine).
  Config task = config;
  task.apply_override("shardcast.relay_urls=[\"" + relay_url + "\"]");
  task.set_string("orchestrator.secrets_dir", (run_dir / "secrets").string());
  orchestrator::Client owner = Pipeline::operator_client(run_dir);
  for (const char* role : {"worker", "worker", "validator"})
    owner.create_task(role, task.to_toml());

  orchestrator::PoolPolicy policy;
  policy.heartbeat_s = 0.5;
  const auto state_of = [&](const std::string& address) {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (const orchestrator::Node& n : owner.nodes())
      if (n.address == address) return orchestrator::node_state(n, now, policy);
    return std::string("absent");
  };
  std::vector<std::string> address(3);
  std::vector<fs::path> node_dir(3);
  for (int i = 0; i < 3; ++i) {
    node_dir[i] = run_dir / "nodes" / ("node-" + std::to_string(i));
    ASSERT_TRUE(wait_for([&] { return fs::exists(node_dir[i] / "node.key"); }, 60));
    address[i] = Identity::load_or_create(node_dir[i] / "node.key").address();
  }
  ASSERT_TRUE(wait_for(
      [&] {
        for (const auto& a : address)
          if (state_of(a) != "healthy") return false;
        return true;
      },
      120))
      << "the agents were not all invited:\n"
      << orchestrator.log();
  ASSERT_TRUE(wait_for([&] { return Pipeline::metric_lines(run_dir) >= 2; }, 600))
      << "no training:\n"
      << trainer.log();
  for (const auto& from : ip) EXPECT_EQ(relay_answers(from), 200) << from;
  EXPECT_EQ(relay_answers("127.0.0.99"), 403);  // no node there

  // Which agent runs what (its task's log names the role).
  std::vector<int> workers;
  int validator = -1;
  for (int i = 0; i < 3; ++i) {
    for (const auto& e : fs::directory_iterator(node_dir[i] / "logs")) {
      const std::string log = read_file(e.path());
      if (log.find("worker ") != std::string::npos &&
          log.find("policies from relays") != std::string::npos)
        workers.push_back(i);
      else
        validator = i;
    }
  }
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_NE(validator, -1);

  // A worker task dies: its agent restarts it, and it loads the policy it had from the cache.
  const int w = workers[0];
  const auto task_log = [&](int i) {
    std::string all;
    for (const auto& e : fs::directory_iterator(node_dir[i] / "logs")) all += read_file(e.path());
    return all;
  };
  ASSERT_TRUE(wait_for(
      [&] { return task_log(w).find("fetched policy version") != std::string::npos; }, 300));
  const std::vector<pid_t> before = children_of(agents[w]->pid());
  ASSERT_EQ(before.size(), 1u);
  ::kill(before[0], SIGKILL);
  ASSERT_TRUE(wait_for(
      [&] { return task_log(w).find("loaded from the weights cache") != std::string::npos; }, 120))
      << agents[w]->log() << task_log(w);
  const std::vector<pid_t> after = children_of(agents[w]->pid());
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(after[0], before[0]);
  EXPECT_CONTAINS(agents[w]->log(), "exited with status 137");
  // The pool owner reads that task's log through the orchestrator, which asks the node's agent.
  const auto logs = run_trellis("orchestrator logs " + address[w] + " --lines 2000 --run-dir " +
                                run_dir.string());
  EXPECT_EQ(logs.status, 0) << logs.output;
  EXPECT_CONTAINS(logs.output, "loaded from the weights cache");

  // An agent stops (SIGSTOP): Unhealthy after 3 missed heartbeats, Dead after 6, and then refused.
  const int s = workers[1];
  agents[s]->signal(SIGSTOP);
  const auto stopped_at = std::chrono::steady_clock::now();
  const auto since_stop = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  };
  ASSERT_TRUE(wait_for([&] { return state_of(address[s]) == "unhealthy"; }, 30));
  EXPECT_GE(since_stop(), 1.0);  // 3 x 0.5 s after its last heartbeat (at most 0.5 s before)
  ASSERT_TRUE(wait_for([&] { return state_of(address[s]) == "dead"; }, 30));
  EXPECT_GE(since_stop(), 2.5);
  // Off the relay's allowlist (it polls the orchestrator's every second); the others stay on it.
  EXPECT_TRUE(wait_for([&] { return relay_answers(ip[s]) == 403; }, 10));
  EXPECT_EQ(relay_answers(ip[w]), 200);
  const Identity stopped = Identity::load_or_create(node_dir[s] / "node.key");
  orchestrator::Client as_node(url, "", 10);
  EXPECT_CONTAINS(test::error_of([&] { as_node.request_work(stopped, 0, 1); }), "it is Dead");
  agents[s]->signal(SIGCONT);
  ASSERT_TRUE(wait_for([&] { return state_of(address[s]) == "healthy"; }, 60)) << agents[s]->log();
  EXPECT_TRUE(wait_for([&] { return relay_answers(ip[s]) == 200; }, 10));

  ASSERT_EQ(trainer.wait(std::chrono::seconds(900)), 0) << trainer.log();
  for (auto& a : agents) EXPECT_EQ(a->stop(SIGTERM, std::chrono::seconds(30)), 0) << a->log();
  EXPECT_EQ(relay.stop(SIGTERM, std::chrono::seconds(30)), 0);
  EXPECT_EQ(orchestrator.stop(SIGTERM, std::chrono::seconds(30)), 0);
  EXPECT_EQ(discovery.stop(SIGTERM, std::chrono::seconds(30)), 0);
  EXPECT_EQ(read_jsonl(run_dir / "metrics.jsonl").size(), static_cast<size_t>(steps));

  // The ledger: it verifies; the stopped node's two invites are on it; each worker node is
  // credited with the completion tokens the orchestrator accepted from it.
  const auto verified = run_trellis("ledger verify " + run_dir.string() + " --keeper " + keeper);
  ASSERT_EQ(verified.status, 0) << verified.output;
  // An invite entry of this run's ledger edited with the sqlite3 shell: verify names it.
  const auto invites = run_trellis("ledger show --json --kind invite " + run_dir.string(), false);
  ASSERT_EQ(invites.status, 0);
  ASSERT_FALSE(split_lines(invites.output).empty());
  const std::string seq =
      std::to_string(Json::parse(split_lines(invites.output)[0])["seq"].get<int64_t>());
  const fs::path tampered = run_dir / "tampered";
  fs::create_directories(tampered);
  fs::copy_file(run_dir / "orchestrator.sqlite", tampered / "orchestrator.sqlite");
  const std::string edit =
      "UPDATE ledger SET body = replace(body, 'nonce', 'nonse') WHERE seq = " + seq;
  ASSERT_EQ(
      std::system(
          ("sqlite3 " + (tampered / "orchestrator.sqlite").string() + " " + quoted(edit)).c_str()),
      0);
  const auto broken = run_trellis("ledger verify " + tampered.string() + " --keeper " + keeper);
  EXPECT_EQ(broken.status, 1) << broken.output;
  EXPECT_CONTAINS(broken.output, "entry " + seq);
  std::map<std::string, int> invites_of;
  for (const auto& line : split_lines(invites.output))
    ++invites_of[Json::parse(line)["body"]["node"].get<std::string>()];
  EXPECT_EQ(invites_of[address[s]], 2) << invites.output;
  EXPECT_EQ(invites_of[address[w]], 1);
  orchestrator::State state(run_dir / "orchestrator.sqlite", "",
                            Identity::load_or_create(run_dir / "keys" / "orchestrator.key"));
  const auto credited = Pipeline::credited_as_accepted(run_dir, state);
  EXPECT_EQ(credited.size(), 2u);
  EXPECT_TRUE(credited.count(address[workers[0]]) && credited.count(address[workers[1]]));
}

TEST_F(Pipeline, ASwarmOfNodeAgentsIsInvitedAndTrains) { run_swarm(dir_, warm_start(), false); }

TEST_F(Pipeline, ASwarmOfNodeAgentsIsInvitedAndTrainsWithRedisDiscovery) {
  run_swarm(dir_, warm_start(), true);
}

TEST_F(Pipeline, AWorkerThatCannotStartEndsTheRunWithItsError) {
  // A configuration only workers read is wrong: rather than restarting them forever, the launcher
  // stops after 3 quick failures in a row and shows why, and no process is left behind.
  const fs::path model = dir_ / "untrained", run_dir = dir_ / "bad-worker";
  ASSERT_EQ(run_trellis("model init --preset tiny --out " + model.string()).status, 0);
  const auto r = run_trellis("run " + example() + " --set model.path=" + model.string() +
                             " --set infer.groups_per_submission=0 --run-dir " + run_dir.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "3 times in a row");
  EXPECT_CONTAINS(r.output, "infer.groups_per_submission");
  EXPECT_NE(
      std::system(("pgrep -f " + quoted("^" + binaries() + " .*" + run_dir.string())).c_str()), 0)
      << "a role outlived the launcher";
}

}  // namespace
}  // namespace trellis::test
