// The dashboard in a real browser (docs/dashboard.md): one `trellis run` (discovery, orchestrator,
// trainer, relay, node agents for a worker and a validator) plus a dishonest worker whose file the
// validator rejects, and a node whose agent state is an HTML injection; then
// dashboard_check.mjs drives Debian's headless Chromium through playwright-core against the
// running orchestrator: 401 without credentials, every node listed, the reward plot gaining a
// point while it watches, the rejected submission opened and its reason read, a node's logs, the
// ledger's verification, and no script run from the injected state. Its screenshots go to
// $TRELLIS_DASHBOARD_SCREENSHOTS when set (docs/images/dashboard/ was made that way), else to the
// test's directory.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "cli/trellis_process.h"
#include "common/files.h"
#include "common/identity.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;

const fs::path kDashboardDir = fs::path(TRELLIS_SOURCE_DIR) / "tests" / "dashboard";
constexpr const char* kChromium = "/usr/bin/chromium";
// An agent state that runs script if the page ever renders a string as HTML.
constexpr const char* kInjection = R"(<img src=x onerror="window.__pwned=1">)";

TEST(Dashboard, AnOperatorSeesTheSwarmInABrowser) {
  ASSERT_TRUE(fs::exists(kChromium))
      << kChromium << " is missing: run scripts/setup.sh (it installs Debian's chromium)";
  ASSERT_TRUE(fs::is_directory(kDashboardDir / "node_modules" / "playwright-core"))
      << "playwright-core is not installed in " << (kDashboardDir / "node_modules").string()
      << ": run scripts/setup.sh (npm ci --prefix tests/dashboard)";

  const fs::path dir = fresh_dir("dashboard");
  fs::create_directories(dir);
  const std::string example = std::string(TRELLIS_SOURCE_DIR) + "/examples/quickstart.toml";
  // A warm start that ends its answers, so that steps fill and the reward plot grows.
  auto r = run_trellis("model init --preset tiny --seed 1 --out " + (dir / "base").string());
  ASSERT_EQ(r.status, 0) << r.output;
  const fs::path warm = dir / "warm";
  r = run_trellis("sft " + example + " --set sft.steps=150 --set sft.eval_tasks=0" +
                  " --set compute.threads=1 --set model.path=" + (dir / "base").string() +
                  " --set sft.out=" + warm.string() + " --run-dir " + (dir / "sft").string());
  ASSERT_EQ(r.status, 0) << r.output;

  // More steps than the test watches: the run is stopped once the browser is done.
  const fs::path run_dir = dir / "run";
  std::vector<std::string> args = {"run", example, "--run-dir", run_dir.string()};
  for (const std::string& setting : std::vector<std::string>{
           "model.path=" + warm.string(), "rl.steps=400", "rl.batch_size=32", "run.workers=1",
           "infer.groups_per_submission=2", "infer.poll_s=0.1", "validator.poll_s=0.1",
           "trainer.checkpoint_every=0", "orchestrator.work_lease_s=60"}) {
    args.push_back("--set");
    args.push_back(setting);
  }
  TrellisProcess run(args);
  const fs::path relay_url = run_dir / "shardcast" / "relay-0" / "relay.url";
  ASSERT_TRUE(wait_for(
      [&] { return fs::exists(relay_url) && fs::exists(run_dir / "orchestrator.url"); }, 180))
      << run.log();
  const std::string url = read_url(run_dir / "orchestrator.url");
  const std::string token =
      orchestrator::client_token(Config::defaults(), run_dir, orchestrator::Role::kTrainer);
  orchestrator::Client operator_client(url, token);

  // A dishonest worker: its file claims rewards the environment does not give.
  const CliResult attack = run_command(
      std::string(TRELLIS_ATTACK_BIN) + " " + (run_dir / "config.toml").string() + " --run-dir " +
      (dir / "attacker").string() + " --attack inflated_rewards --set orchestrator.url=" + url +
      " --set shardcast.relay_urls=[\\\"" + read_url(relay_url) + "\\\"] --set compute.threads=1");
  ASSERT_EQ(attack.status, 0) << attack.output;
  std::string reason;
  ASSERT_TRUE(wait_for(
      [&] {
        for (const auto& s : operator_client.submissions("rejected")) reason = s.reason;
        return !reason.empty();
      },
      300))
      << run.log();

  // A node of our own whose agent state is markup (a stranger chooses that text).
  const Identity injector = Identity::load_or_create(dir / "injector.key");
  orchestrator::Client(url).register_node(injector);
  const auto beat = orchestrator::Client(url).heartbeat(injector, kInjection);
  ASSERT_TRUE(beat.refused.empty()) << beat.why;

  // Every node the orchestrator knows, once both agents and the attacker have joined.
  std::vector<std::string> nodes;
  ASSERT_TRUE(wait_for(
      [&] {
        nodes.clear();
        for (const auto& n : operator_client.nodes()) nodes.push_back(n.address);
        return nodes.size() >= 4;
      },
      60));
  // The first is a node agent's, whose logs the check opens (the others have no agent).
  const std::string agent =
      Identity::load_or_create(run_dir / "nodes" / "node-0" / "node.key").address();
  ASSERT_NE(std::find(nodes.begin(), nodes.end(), agent), nodes.end());
  std::string node_list = agent;
  for (const auto& n : nodes)
    if (n != agent) node_list += "," + n;

  const char* shots_env = std::getenv("TRELLIS_DASHBOARD_SCREENSHOTS");
  const fs::path shots = shots_env != nullptr ? fs::path(shots_env) : dir / "screenshots";
  fs::create_directories(shots);
  // The reason's first finding, as the operator must be able to read it.
  const std::string expected = reason.substr(0, std::min<size_t>(reason.size(), 48));
  const CliResult check =
      run_command("node " + test::quoted((kDashboardDir / "dashboard_check.mjs").string()) +
                  " --url " + test::quoted(url) + " --token " + test::quoted(token) + " --nodes " +
                  test::quoted(node_list) + " --reason-contains " + test::quoted(expected) +
                  " --injected " + test::quoted(kInjection) + " --screenshots " +
                  test::quoted(shots.string()) + " --chromium " + kChromium);
  EXPECT_EQ(check.status, 0) << check.output;
  std::printf("%s", check.output.c_str());

  EXPECT_EQ(run.stop(SIGINT, std::chrono::seconds(120)), 130) << run.log();
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace trellis::test
