// End-to-end tests of the decoupled pipeline as `trellis run` starts it: an orchestrator, a
// trainer and two inference workers as separate processes on loopback, meeting only through
// HTTP, signed Parquet rollout files and the policy directory. A short run leaves the run
// directory the docs describe; a run whose worker and orchestrator are killed (SIGKILL) mid-run
// is restarted by the launcher, loses no accepted rollout, and completes; a C3PO++ worker fills
// the steps with groups that name their draws; a worker that cannot start ends the run with its
// error.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/identity.h"
#include "common/json.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"
#include "orchestrator/state.h"
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
 protected:
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
  static std::string url_of(const fs::path& run_dir) {
    std::string url = read_file(run_dir / "orchestrator.url");
    while (!url.empty() && std::isspace(static_cast<unsigned char>(url.back()))) url.pop_back();
    return url;
  }
  static bool wait_for(const std::function<bool()>& done, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return done();
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
  const auto r = run_trellis(run_args(run_dir, steps));
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
       {"orchestrator", "trainer", "relay-0", "worker-0", "worker-1", "validator-0"})
    EXPECT_TRUE(fs::exists(run_dir / "logs" / (std::string(role) + ".log"))) << role;
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step_4" / "optimizer.pt"));
  // Policies went out through SHARDCAST: the origin published every version (signed), the relay
  // pulled them, and the workers fetched verified copies.
  const auto origin = shardcast::read_manifest(run_dir / "shardcast" / "origin");
  ASSERT_NE(origin.newest(), nullptr);
  EXPECT_EQ(origin.newest()->version, steps);
  const std::string trainer_key =
      Identity::load_or_create(run_dir / "keys" / "trainer.key").address();
  for (const auto& v : origin.versions) EXPECT_TRUE(v.signed_by(trainer_key)) << v.version;
  EXPECT_FALSE(shardcast::read_manifest(run_dir / "shardcast" / "relay-0").versions.empty());
  for (const char* worker : {"worker-0", "worker-1"})
    EXPECT_CONTAINS(read_file(run_dir / "logs" / (std::string(worker) + ".log")),
                    "fetched policy version");
  // The validator judged every file the trainer used, honest workers were never rejected, and
  // the report plots what was decided.
  EXPECT_CONTAINS(read_file(run_dir / "logs" / "validator-0.log"), "accepted step 0 submission");
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
  std::map<std::string, int64_t> accepted_tokens;
  for (const auto& sub : state.submissions("accepted")) {
    accepted_tokens[sub.key.node_address] += sub.counts.completion_tokens;
  }
  const auto sums = run_trellis("ledger contributions --json " + run_dir.string(), false);
  ASSERT_EQ(sums.status, 0) << sums.output;
  std::map<std::string, int64_t> credited;
  for (const auto& line : split_lines(sums.output)) {
    const Json row = Json::parse(line);
    if (row["work_units"].get<int64_t>() > 0) credited[row["node"]] = row["work_units"];
  }
  EXPECT_EQ(credited, accepted_tokens);
  EXPECT_EQ(credited.size(), 2u);
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
  EXPECT_CONTAINS(read_file(run_dir / "logs" / "worker-0.log"), "C3PO++ partial rollouts");
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

TEST_F(Pipeline, KilledWorkerAndOrchestratorLoseNoAcceptedRolloutAndTheRunCompletes) {
  const fs::path run_dir = dir_ / "killed";
  const int steps = 20;  // long enough that both kills land mid-run
  auto launcher =
      std::async(std::launch::async, [&] { return run_trellis(run_args(run_dir, steps)); });
  ASSERT_TRUE(wait_for([&] { return metric_lines(run_dir) >= 2; }, 600)) << "no progress";
  const auto before = accepted(run_dir, steps);
  ASSERT_FALSE(before.empty());

  kill_matching("infer " + (run_dir / "config.toml").string() + " .*infer.name=worker-0");
  ASSERT_TRUE(wait_for([&] { return metric_lines(run_dir) >= 4; }, 600)) << "no progress";
  kill_matching("orchestrator " + (run_dir / "config.toml").string() + " .*orchestrator.port=");
  kill_matching("relay " + (run_dir / "config.toml").string() + " .*relay.name=relay-0");
  const auto r = launcher.get();
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "worker-0 exited");
  EXPECT_CONTAINS(r.output, "orchestrator exited");
  EXPECT_CONTAINS(r.output, "relay-0 exited");
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
  EXPECT_EQ(sha256_hex(client.download(0, first.name)), first.sha256);
  kill_matching("orchestrator " + (run_dir / "config.toml").string(), "TERM");
  EXPECT_EQ(orchestrator.get().status, 0) << "a clean shutdown on SIGTERM";
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
