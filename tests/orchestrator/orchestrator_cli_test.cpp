// `trellis orchestrator` as a launcher runs it: the real binary on a free port (port 0, the URL
// read from <run dir>/orchestrator.url), killed with SIGKILL in the middle of a run and started
// again on the same run directory, where it still lists every accepted file, keeps the run ID,
// the step counter and the policy version, and goes on accepting; SIGTERM ends it cleanly.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include "cli/run_cli.h"
#include "cli/trellis_process.h"
#include "common/files.h"
#include "common/hashing.h"
#include "error_of.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"
#include "rollout_fixtures.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A `trellis orchestrator` child process that also finds the URL it announces.
class OrchestratorProcess : public TrellisProcess {
 public:
  using TrellisProcess::TrellisProcess;

  // The URL in `url_file` once it answers GET /healthz (a file left by a killed process names a
  // dead server), or "" if the process exits or time runs out.
  std::string wait_for_url(const fs::path& url_file, std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      std::string url;
      try {
        url = read_file(url_file);
      } catch (const Error&) {
        // not written yet
      }
      while (!url.empty() && url.back() == '\n') url.pop_back();
      if (!url.empty()) {
        httplib::Client http(url);
        http.set_connection_timeout(1, 0);
        auto res = http.Get("/healthz");
        if (res && res->status == 200) return url;
      }
      if (exited()) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return "";
  }
};

TEST(OrchestratorCli, SurvivesSigkillWithEveryAcceptedFile) {
  const fs::path run_dir = fs::temp_directory_path() /
                           ("trellis_orchestrator_cli_" + std::to_string(::getpid())) / "run-7";
  fs::remove_all(run_dir.parent_path());
  const std::vector<std::string> args = {
      "orchestrator",
      "--run-dir",
      run_dir.string(),
      "--set",
      "orchestrator.port=0",
      "--set",
      "rl.steps=3",
      "--set",
      "rl.batch_size=4",
      "--set",
      "rl.async_level=1",
      "--set",
      "orchestrator.validation=false"};  // accepted at once: no validators here
  const Identity worker = Identity::generate();
  std::string run_id;  // the run directory's name and random bits, fixed at the first start
  const auto file = [&](int32_t step, int32_t sub, std::vector<std::vector<float>> groups) {
    return signed_file({run_id, worker.address(), step, sub, 0}, groups, worker);
  };

  std::vector<std::string> sent;
  orchestrator::Status before;
  {
    OrchestratorProcess first(args);
    const std::string url =
        first.wait_for_url(run_dir / "orchestrator.url", std::chrono::seconds(60));
    ASSERT_FALSE(url.empty()) << first.log();
    orchestrator::Client client(url, "", 10);
    run_id = client.status().run_id;
    EXPECT_EQ(run_id.substr(0, 6), "run-7-");
    // The privileged tokens were created, readable by their owner only.
    for (const char* name : {"trainer.token", "validator.token"}) {
      struct stat st {};
      ASSERT_EQ(::stat((run_dir / "secrets" / name).c_str(), &st), 0) << name;
      EXPECT_EQ(st.st_mode & 0777, 0600u) << name;
    }
    client.register_node(worker);
    // The file without signal first: step 0 then needs another, and once full it takes no more.
    sent = {file(0, 0, {{1, 1}}), file(0, 1, {{0, 1, 0, 1}}), file(1, 0, {{0, 1}})};
    const std::vector<std::pair<int64_t, int64_t>> keys = {{0, 0}, {0, 1}, {1, 0}};
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto work = client.request_work(worker, 0, 1).work;
      ASSERT_TRUE(work);
      EXPECT_EQ(work->step, keys[i].first);
      EXPECT_EQ(work->submission, keys[i].second);
      EXPECT_EQ(client.submit(worker, keys[i].first, keys[i].second, sent[i]), "accepted");
    }
    ASSERT_TRUE(client.request_work(worker, 0, 1).work);  // step 1, submission 1
    EXPECT_NE(error_of([&] { client.submit(worker, 1, 1, "garbage"); }), "");
    before = client.status();
    EXPECT_EQ(before.step, 1);  // step 0 has its 4 signal samples, step 1 has 2
    EXPECT_EQ(before.accepted, 3);
    EXPECT_EQ(before.rejected, 1);
    EXPECT_NE(first.log().find("accepted step 0 submission 0"), std::string::npos) << first.log();
    EXPECT_NE(first.log().find("rejected step 1 submission 1"), std::string::npos) << first.log();
    EXPECT_EQ(first.stop(SIGKILL, std::chrono::seconds(10)), -1);  // killed, no clean exit
  }
  EXPECT_TRUE(fs::exists(run_dir / "orchestrator.url"));  // stale: the restart replaces it

  OrchestratorProcess second(args);
  const std::string url =
      second.wait_for_url(run_dir / "orchestrator.url", std::chrono::seconds(60));
  ASSERT_FALSE(url.empty()) << second.log();
  orchestrator::Client client(
      url,  // as the operator
      orchestrator::client_token(Config::defaults(), run_dir, orchestrator::Role::kTrainer), 10);
  const orchestrator::Status after = client.status();
  EXPECT_EQ(after.run_id, run_id);
  EXPECT_EQ(after.step, before.step);
  EXPECT_EQ(after.accepted, 3);
  EXPECT_EQ(after.rejected, 1);
  const auto step0 = client.accepted(0), step1 = client.accepted(1);
  ASSERT_EQ(step0.size(), 2u);
  ASSERT_EQ(step1.size(), 1u);
  EXPECT_EQ(step0[0].submission, 0);  // in acceptance order
  EXPECT_EQ(step0[1].submission, 1);
  EXPECT_EQ(client.download(0, step0[0]), sent[0]);
  EXPECT_EQ(client.download(0, step0[1]), sent[1]);
  EXPECT_EQ(client.download(1, step1[0]), sent[2]);
  EXPECT_EQ(step1[0].sha256, sha256_hex(sent[2]));

  // It goes on: the worker's next work is step 1 again, which fills, and the counter moves.
  const auto work = client.request_work(worker, 0, 1).work;
  ASSERT_TRUE(work);
  EXPECT_EQ(work->step, 1);
  EXPECT_EQ(work->submission, 2);
  EXPECT_EQ(client.submit(worker, 1, 2, file(1, 2, {{1, 0}})), "accepted");
  EXPECT_EQ(client.status().step, 2);
  EXPECT_EQ(second.stop(SIGTERM, std::chrono::seconds(20)), 0) << second.log();
  EXPECT_NE(second.log().find("shutting down"), std::string::npos) << second.log();
  EXPECT_FALSE(fs::exists(run_dir / "orchestrator.url"));
  fs::remove_all(run_dir.parent_path());
}

// The pool owner's commands against a running orchestrator under join = "stake": a node is
// refused until `trellis orchestrator stake` deposits enough, and the deposits are on the ledger
// that `trellis ledger` reads.
TEST(OrchestratorCli, TheOwnersStakeCommandAdmitsANode) {
  const fs::path run_dir = fs::temp_directory_path() /
                           ("trellis_orchestrator_stake_" + std::to_string(::getpid())) / "pool";
  fs::remove_all(run_dir.parent_path());
  OrchestratorProcess server({"orchestrator", "--run-dir", run_dir.string(), "--set",
                              "orchestrator.port=0", "--set", "orchestrator.join=stake", "--set",
                              "orchestrator.stake=50"});
  const std::string url =
      server.wait_for_url(run_dir / "orchestrator.url", std::chrono::seconds(60));
  ASSERT_FALSE(url.empty()) << server.log();
  const Identity node = Identity::generate();
  orchestrator::Client client(url, "", 10);
  EXPECT_NE(error_of([&] { client.register_node(node); }).find("holds a stake of 0"),
            std::string::npos);
  const auto stake = [&](const std::string& amount) {
    return run_trellis("orchestrator stake " + node.address() + " " + amount + " --run-dir " +
                       run_dir.string());
  };
  auto r = stake("20");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("stake of 20 work units"), std::string::npos) << r.output;
  EXPECT_NE(stake("-5").status, 0);
  r = stake("30");
  ASSERT_EQ(r.status, 0) << r.output;
  client.register_node(node);  // admitted now
  r = run_trellis("ledger contributions --json " + run_dir.string(), false);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(Json::parse(r.output)["staked"], 50) << r.output;
  fs::remove_all(run_dir.parent_path());
}

}  // namespace
}  // namespace trellis::test
