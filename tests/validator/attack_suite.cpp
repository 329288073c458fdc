// The attack suite (specs/toploc.md §7): one `trellis run` (orchestrator, trainer, relay, an
// honest worker and a validator as separate processes) while trellis_attack plays every row of
// the attack matrix as a node of its own. Each test asserts that one attack was rejected by the
// check the matrix names; the honest worker, and an attacker process playing honest as a control,
// are never rejected.
#include <algorithm>
#include <future>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "cli/trellis_process.h"
#include "common/files.h"
#include "common/identity.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"
#include "protocol_abuse.h"
#include "rollout/store.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;

CliResult run_attack(const std::string& args) {
  return run_command(std::string(TRELLIS_ATTACK_BIN) + " " + args);
}

// The checks that may name each attack's rejection (the reason's first word, or a later finding).
const std::map<std::string, std::vector<std::string>>& expected_checks() {
  static const std::map<std::string, std::vector<std::string>> m = {
      {"noisy_weights", {"toploc:"}},
      {"older_policy", {"toploc:", "sampling:"}},  // sampling when the versions are close
      {"fp8_weights", {"toploc:"}},
      {"small_model", {"sampling:"}},
      {"edited_tokens", {"sampling:"}},
      {"truncated", {"termination:"}},
      {"early_eos", {"termination:", "sampling:"}},
      {"cherry_picked", {"data sampling:"}},
      {"repeated_prompts", {"data sampling:", "upload:"}},  // upload: beyond one-group work
      {"inflated_rewards", {"reward:", "bounds:"}},
      {"inflated_advantages", {"bounds:"}},
      {"wrong_proof_length", {"schema:"}},
      {"malformed_file", {"schema:"}},
      {"replayed_file", {"step binding:", "signature:"}},
      {"replayed_resigned", {"data sampling:"}},
  };
  return m;
}

class Attacks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("attacks");
    fs::create_directories(dir_);
    const std::string example = std::string(TRELLIS_SOURCE_DIR) + "/examples/quickstart.toml";
    // A warm start that ends its answers (random weights never do: no step would fill), and an
    // unrelated model for the cheap-model attack.
    auto r = run_trellis("model init --preset tiny --seed 1 --out " + (dir_ / "base").string());
    ASSERT_EQ(r.status, 0) << r.output;
    r = run_trellis("model init --preset tiny --seed 2 --out " + (dir_ / "other").string());
    ASSERT_EQ(r.status, 0) << r.output;
    const fs::path warm = dir_ / "warm";
    r = run_trellis("sft " + example + " --set sft.steps=150 --set sft.eval_tasks=0" +
                    " --set compute.threads=1 --set model.path=" + (dir_ / "base").string() +
                    " --set sft.out=" + warm.string() + " --run-dir " + (dir_ / "sft").string());
    ASSERT_EQ(r.status, 0) << r.output;

    // Every completion is checked by prefill, so that an attack on one row cannot slip through.
    // An attacker that takes work and never delivers holds its share for one lease: a short one
    // here, so that the run goes on.
    run_dir_ = dir_ / "run";
    std::vector<std::string> args = {"run", example, "--run-dir", run_dir_.string()};
    const std::vector<std::string> settings = {"model.path=" + warm.string(),
                                               "rl.steps=24",
                                               "rl.batch_size=32",
                                               "run.workers=1",
                                               "infer.groups_per_submission=2",
                                               "infer.poll_s=0.1",
                                               "validator.sample_fraction=1",
                                               "validator.poll_s=0.1",
                                               "trainer.checkpoint_every=0",
                                               "orchestrator.work_lease_s=60"};
    for (const auto& setting : settings) {
      args.push_back("--set");
      args.push_back(setting);
    }
    run_ = std::make_unique<TrellisProcess>(args);
    const fs::path relay_url = run_dir_ / "shardcast" / "relay-0" / "relay.url";
    ASSERT_TRUE(wait_for(
        [&] { return fs::exists(relay_url) && fs::exists(run_dir_ / "orchestrator.url"); }, 180))
        << run_->log();
    url_ = read_url(run_dir_ / "orchestrator.url");
    // The honest worker is the node agent that pulled task 1 (the worker task; 2 is the
    // validator's): its key is the node's.
    fs::path honest_node;
    ASSERT_TRUE(wait_for(
        [&] {
          for (const char* node : {"node-0", "node-1"})
            if (fs::exists(run_dir_ / "nodes" / node / "logs" / "task-1.log"))
              honest_node = run_dir_ / "nodes" / node;
          return !honest_node.empty();
        },
        180))
        << run_->log();
    honest_worker_ = Identity::load_or_create(honest_node / "node.key").address();
    validator_log_ = (honest_node.filename() == "node-0" ? run_dir_ / "nodes" / "node-1"
                                                         : run_dir_ / "nodes" / "node-0") /
                     "logs" / "task-2.log";

    // The protocol abuse, while the attackers play: the servers' memory before it, each abuse's
    // answer, a flood of status requests, then whether the same processes still serve.
    orchestrator_pid_ = child_with_role(run_->pid(), "orchestrator");
    relay_pid_ = child_with_role(run_->pid(), "relay");
    memory_before_ = {peak_memory_bytes(orchestrator_pid_), peak_memory_bytes(relay_pid_)};
    const std::string run_id = orchestrator::Client(url_).status().run_id;
    auto abuse = std::async(std::launch::async, [run_id, relay = read_url(relay_url)] {
      auto outcomes = play_protocol_abuses(url_, relay, run_id, honest_worker_);
      flood_answered_ = flood_status(url_, kFloodThreads, kFloodRequests);
      return outcomes;
    });

    // Every attacker at once, each a node of its own; the honest control too.
    auto launch = [&](const std::string& name) {
      std::string args = (run_dir_ / "config.toml").string() + " --run-dir " +
                         (dir_ / "attackers").string() + " --attack " + name + " --other-model " +
                         (dir_ / "other").string() + " --set orchestrator.url=" + url_ +
                         " --set shardcast.relay_urls=[\\\"" + read_url(relay_url) + "\\\"]" +
                         " --set compute.threads=1";
      if (name == "older_policy") args += " --min-version 3";
      // A replayer's accomplice: the accepted files of others (only the trainer may list them).
      if (name.starts_with("replayed")) args += " --steal-from " + (run_dir_ / "rollouts").string();
      return std::async(std::launch::async, [args] { return run_attack(args); });
    };
    std::vector<std::pair<std::string, std::future<CliResult>>> runs;
    auto names = std::vector<std::string>{"honest"};
    for (const auto& [name, checks] : expected_checks()) names.push_back(name);
    for (const auto& name : names) runs.emplace_back(name, launch(name));
    abuse_ = abuse.get();
    memory_after_ = {peak_memory_bytes(orchestrator_pid_), peak_memory_bytes(relay_pid_)};

    // As the operator: listing submissions takes the trainer's token the run created.
    orchestrator::Client client(url_, orchestrator::client_token(Config::defaults(), run_dir_,
                                                                 orchestrator::Role::kTrainer));
    // Waits for the attackers of `runs`, then until no submission of an attacker still waits for
    // a verdict.
    auto settle = [&] {
      for (auto& [name, future] : runs) {
        const CliResult result = future.get();
        outputs_[name] = result.output;
        if (result.status != 0) continue;
        const auto line = result.output.substr(result.output.rfind('{'));
        nodes_[name] = Json::parse(line).at("node").get<std::string>();
      }
      runs.clear();
      return wait_for(
          [&] {
            for (const auto& s : client.submissions()) {
              if (s.status == "validating" || s.status == "pending") {
                for (const auto& [name, node] : nodes_)
                  if (s.key.node_address == node) return false;
              }
            }
            return true;
          },
          300);
    };
    ASSERT_TRUE(settle()) << read_file(validator_log_);
    // An attacker whose every file came after its step had filled was dropped unjudged, which
    // proves nothing either way: it plays again, up to twice, while the run goes on.
    for (int retry = 0; retry < 2 && !run_->exited(); ++retry) {
      submissions_ = client.submissions();
      for (const auto& [name, checks] : expected_checks()) {
        const auto subs = of(name);
        const bool judged = std::any_of(subs.begin(), subs.end(), [](const auto& s) {
          return s.status == "accepted" || s.status == "rejected";
        });
        if (nodes_.count(name) && !judged) runs.emplace_back(name, launch(name));
      }
      if (runs.empty()) break;
      ASSERT_TRUE(settle()) << read_file(validator_log_);
    }
    submissions_ = client.submissions();
    nodes_seen_ = client.nodes();
    // The run goes on to its last step.
    run_status_ = run_->wait(std::chrono::seconds(900));
  }

  static void TearDownTestSuite() {
    run_.reset();
    // A failed suite leaves the run (logs, rejected files) for a look.
    if (::testing::UnitTest::GetInstance()->failed_test_count() == 0) {
      fs::remove_all(dir_);
    } else {
      std::fprintf(stderr, "the attack run is left in %s\n", dir_.c_str());
    }
  }

  // The submissions of `attack`'s node, with every rejection reason.
  static std::vector<orchestrator::Submission> of(const std::string& attack) {
    std::vector<orchestrator::Submission> out;
    const auto node = nodes_.find(attack);
    if (node == nodes_.end()) return out;
    for (const auto& s : submissions_)
      if (s.key.node_address == node->second) out.push_back(s);
    return out;
  }

  static void expect_rejected(const std::string& attack) {
    ASSERT_TRUE(nodes_.count(attack)) << attack << " did not upload:\n" << outputs_[attack];
    const auto subs = of(attack);
    ASSERT_FALSE(subs.empty()) << attack;
    int64_t rejected = 0;
    for (const auto& s : subs) {
      // Work it never finished, or whose step filled before its file came (never judged).
      if (s.status == "assigned" || s.status == "pending" || s.status == "dropped") continue;
      ++rejected;
      EXPECT_EQ(s.status, "rejected") << attack << ": " << s.reason;
      bool named = false;
      for (const auto& check : expected_checks().at(attack))
        named = named || s.reason.find(check) != std::string::npos;
      EXPECT_TRUE(named) << attack << " was rejected for another reason: " << s.reason;
    }
    EXPECT_GT(rejected, 0) << attack << " has no rejected submission";
  }

  static constexpr int kFloodThreads = 8, kFloodRequests = 250;
  static inline std::vector<AbuseOutcome> abuse_;
  static inline int64_t flood_answered_ = 0;
  static inline pid_t orchestrator_pid_ = -1, relay_pid_ = -1;
  static inline std::pair<int64_t, int64_t> memory_before_, memory_after_;
  static inline int run_status_ = -1;
  static inline fs::path dir_, run_dir_;
  static inline std::string url_, honest_worker_;
  static inline fs::path validator_log_;
  static inline std::unique_ptr<TrellisProcess> run_;
  static inline std::map<std::string, std::string> nodes_, outputs_;
  static inline std::vector<orchestrator::Submission> submissions_;
  static inline std::vector<orchestrator::Node> nodes_seen_;
};

TEST_F(Attacks, HonestWorkersAreNeverRejected) {
  int64_t accepted = 0;
  for (const auto& s : submissions_) {
    if (s.key.node_address != honest_worker_) continue;
    EXPECT_NE(s.status, "rejected") << s.reason;
    accepted += s.status == "accepted";
  }
  EXPECT_GT(accepted, 0);
  ASSERT_TRUE(nodes_.count("honest")) << outputs_["honest"];
  for (const auto& s : of("honest")) EXPECT_NE(s.status, "rejected") << s.reason;
}

TEST_F(Attacks, DifferentWeightsAreCaughtByTheProof) { expect_rejected("noisy_weights"); }
TEST_F(Attacks, AnOlderPolicyThanClaimedIsCaughtByRecomputation) {
  expect_rejected("older_policy");
}
TEST_F(Attacks, Fp8WeightsAreCaughtByTheProof) { expect_rejected("fp8_weights"); }
TEST_F(Attacks, TokensOfACheaperModelAreCaughtBySampling) { expect_rejected("small_model"); }
TEST_F(Attacks, EditedTokensAreCaughtBySampling) { expect_rejected("edited_tokens"); }
TEST_F(Attacks, ATruncatedCompletionIsCaughtByTermination) { expect_rejected("truncated"); }
TEST_F(Attacks, AForcedEarlyEosIsCaughtByTerminationOrSampling) { expect_rejected("early_eos"); }
TEST_F(Attacks, CherryPickedPromptsAreCaughtByFixedDataSampling) {
  expect_rejected("cherry_picked");
}
TEST_F(Attacks, RepeatedPromptsAreCaughtByFixedDataSampling) {
  expect_rejected("repeated_prompts");
}
TEST_F(Attacks, InflatedRewardsAreCaughtByTheRewardRecheck) { expect_rejected("inflated_rewards"); }
TEST_F(Attacks, InflatedAdvantagesAreCaughtByBounds) { expect_rejected("inflated_advantages"); }
TEST_F(Attacks, AProofOfTheWrongLengthIsCaughtBySchema) { expect_rejected("wrong_proof_length"); }
TEST_F(Attacks, AMalformedFileIsCaughtBySchema) { expect_rejected("malformed_file"); }
TEST_F(Attacks, AFileReplayedFromAnotherNodeIsCaughtByStepBinding) {
  expect_rejected("replayed_file");
}
TEST_F(Attacks, AReplayedFileResignedAsItsOwnIsCaughtByFixedDataSampling) {
  expect_rejected("replayed_resigned");
}

// Every protocol abuse gets the answer of a defended server; bodies that never end or claim too
// much are cut off long before their end.
TEST_F(Attacks, ProtocolAbuseIsRefusedWithItsStatus) {
  ASSERT_GE(abuse_.size(), 21u);
  for (const auto& a : abuse_) {
    EXPECT_EQ(a.status, a.expected) << a.name << ": " << a.answer;
    EXPECT_LT(a.body_sent, 16 << 20) << a.name << ": the server read the body";
  }
  EXPECT_EQ(flood_answered_, kFloodThreads * kFloodRequests);
}

// The orchestrator and the relay survive it (the same processes), their memory bounded.
TEST_F(Attacks, TheServersSurviveTheAbuseWithBoundedMemory) {
  ASSERT_GT(orchestrator_pid_, 0);
  ASSERT_GT(relay_pid_, 0);
  EXPECT_GT(memory_after_.first, 0) << "the orchestrator died";
  EXPECT_GT(memory_after_.second, 0) << "the relay died";
  constexpr int64_t kMiB = 1 << 20;
  std::printf(
      "peak memory before and after the abuse: orchestrator %lld -> %lld MiB, relay %lld -> "
      "%lld MiB\n",
      static_cast<long long>(memory_before_.first / kMiB),
      static_cast<long long>(memory_after_.first / kMiB),
      static_cast<long long>(memory_before_.second / kMiB),
      static_cast<long long>(memory_after_.second / kMiB));
  EXPECT_LT(memory_after_.first - memory_before_.first, 128 * kMiB)
      << "orchestrator peak " << memory_before_.first / kMiB << " -> " << memory_after_.first / kMiB
      << " MiB";
  EXPECT_LT(memory_after_.second - memory_before_.second, 128 * kMiB)
      << "relay peak " << memory_before_.second / kMiB << " -> " << memory_after_.second / kMiB
      << " MiB";
}

// The run reaches its last step, and every file accepted along the way is in the rollout store.
TEST_F(Attacks, TheRunCompletesWithNothingAcceptedLost) {
  EXPECT_EQ(run_status_, 0) << run_->log();
  int64_t accepted = 0;
  for (const auto& s : submissions_) {
    if (s.status != "accepted") continue;
    ++accepted;
    const fs::path file = run_dir_ / "rollouts" / ("step_" + std::to_string(s.key.step)) /
                          rollout::stored_file_name(s.key.node_address, s.key.submission, "test");
    EXPECT_TRUE(fs::exists(file)) << file;
  }
  EXPECT_GT(accepted, 0);
}

// A validator's reject marks the node and evicts it (orchestrator.evict_on_reject); what the
// orchestrator refuses at upload (a malformed or replayed file, repeated prompts beyond one-group
// work) never reaches a validator.
TEST_F(Attacks, NodesRejectedByTheValidatorAreMarkedAndEvicted) {
  int checked = 0;
  for (const auto& [attack, checks] : expected_checks()) {
    if (attack == "malformed_file" || attack == "replayed_file") continue;
    const auto node = nodes_.find(attack);
    if (node == nodes_.end()) continue;  // its own test reports that it never uploaded
    const auto subs = of(attack);
    if (std::none_of(subs.begin(), subs.end(),
                     [](const auto& s) { return s.reason.starts_with("validator "); }))
      continue;  // refused at upload
    ++checked;
    const auto it = std::find_if(nodes_seen_.begin(), nodes_seen_.end(),
                                 [&](const auto& n) { return n.address == node->second; });
    ASSERT_NE(it, nodes_seen_.end()) << attack;
    EXPECT_TRUE(it->evicted) << attack;
    EXPECT_GE(it->rejections, 1) << attack;
    EXPECT_NE(it->last_rejection.find("validator"), std::string::npos) << it->last_rejection;
  }
  EXPECT_GE(checked, 11) << "most attacks reach a validator";
}

}  // namespace
}  // namespace trellis::test
