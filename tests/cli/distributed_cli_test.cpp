// The sharded trainer end to end (rl/process_group.h, rl/optimizer.h, rl/trainer_ranks.h): real
// `trellis rl` processes whose ranks meet over c10d/Gloo on loopback. Two ranks must compute what
// one does on the same samples (fp32, 1e-5 relative), hold half the optimizer state each, resume
// each other's checkpoints, and end together with a failed rank's error.
//
// The runs sample every step's batch from the initial policy (rl.async_level = rl.steps), so
// each run trains on the same rollouts whatever its number of ranks; the length reward gives the
// untrained tiny model's groups a signal.
#include <cmath>
#include <cstring>
#include <sstream>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "cli/trellis_process.h"
#include "common/files.h"
#include "common/json.h"
#include "nginx_process.h"  // free_port

namespace trellis {
namespace {
namespace fs = std::filesystem;
using namespace test;

// Every F32 tensor of a safetensors file by name (the format: an 8-byte header length, a JSON
// header of dtype/shape/data_offsets, the data), read independently of Trellis's reader.
std::map<std::string, std::vector<float>> read_f32_tensors(const fs::path& file) {
  const std::string bytes = read_file(file);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const Json header = Json::parse(bytes.substr(8, header_len));
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(t.at("dtype"), "F32") << name;
    const auto begin = t.at("data_offsets").at(0).get<size_t>();
    const auto end = t.at("data_offsets").at(1).get<size_t>();
    std::vector<float> v((end - begin) / 4);
    std::memcpy(v.data(), bytes.data() + 8 + header_len + begin, end - begin);
    out[name] = std::move(v);
  }
  return out;
}

// Within 1e-5 of each other relative to the model's largest weight, element by element. (Not
// relative to each tensor's own scale: the key projections' biases get a gradient that is zero
// but for rounding, since softmax cancels them, and AdamW turns that noise into steps of the
// learning rate's size, different in every summation order; they move about 1e-3 from zero and
// differ by about 1e-6 between one and two ranks, as they would between two micro-batch sizes.)
void expect_same_weights(const fs::path& a, const fs::path& b) {
  const auto ta = read_f32_tensors(a / "model.safetensors");
  const auto tb = read_f32_tensors(b / "model.safetensors");
  ASSERT_EQ(ta.size(), tb.size());
  float scale = 0;
  for (const auto& [name, vb] : tb)
    for (float x : vb) scale = std::max(scale, std::fabs(x));
  for (const auto& [name, va] : ta) {
    const auto& vb = tb.at(name);
    ASSERT_EQ(va.size(), vb.size()) << name;
    float worst = 0;
    for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::fabs(va[i] - vb[i]));
    EXPECT_LE(worst, 1e-5f * scale) << name << " in " << a << " vs " << b;
  }
}

// The same metrics, step by step, within 1e-5 relative (plus 1e-8 for values near zero: the loss
// sums terms of both signs).
void expect_same_metrics(const std::vector<Json>& a, const std::vector<Json>& b,
                         size_t from_b = 0) {
  for (size_t i = 0; i < b.size(); ++i) {
    const Json& x = a.at(i + from_b);
    const Json& y = b[i];
    EXPECT_EQ(x["step"], y["step"]);
    for (const char* key : {"loss", "grad_norm", "entropy", "mismatch/k3", "clip/low_frac",
                            "clip/high_frac", "reward/mean", "samples"}) {
      const double u = x.at(key).get<double>(), v = y.at(key).get<double>();
      EXPECT_NEAR(u, v, 1e-5 * std::fabs(v) + 1e-8) << key << " at step " << y["step"];
    }
  }
}

class DistributedCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("distributed");
    fs::create_directories(dir_);
    const auto r =
        run_trellis("model init --preset tiny --seed 1 --out " + (dir_ / "base").string());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string args(const std::string& model) {
    return std::string(TRELLIS_SOURCE_DIR) +
           "/examples/reverse_text.toml --set model.path=" + model +
           " --dtype fp32 --threads 1 --set rl.steps=5 --set rl.batch_size=16 "
           "--set rl.group_size=4 --set rl.async_level=5 --set rl.max_tokens=24 "
           "--set 'env.length.targets=[8, 16]' --set env.length.alpha=0.01 "
           "--set trainer.checkpoint_every=2 --set trainer.keep_checkpoints=0";
  }
  static CliResult rl(const std::string& run, const std::string& extra) {
    return run_trellis("rl " + args((dir_ / "base").string()) + " --run-dir " +
                       (dir_ / run).string() + " " + extra);
  }
  static fs::path step_dir(const std::string& run, int step) {
    return dir_ / run / "checkpoints" / ("step_" + std::to_string(step));
  }
  // A new run directory holding `from`'s checkpoint of `step`, to resume.
  static void copy_checkpoint(const std::string& from, int step, const std::string& to) {
    fs::create_directories(dir_ / to / "checkpoints");
    fs::copy(step_dir(from, step), step_dir(to, step), fs::copy_options::recursive);
  }
  static fs::path dir_;
};
fs::path DistributedCli::dir_;

// One test, so that the one-rank and two-rank runs are made once and compared every way.
TEST_F(DistributedCli, TwoRanksTrainAsOneAndResumeEachOthersCheckpoints) {
  auto r = rl("one", "--nproc 1");
  ASSERT_EQ(r.status, 0) << r.output;
  r = rl("two", "--nproc 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "trainer: 2 ranks");
  EXPECT_TRUE(fs::exists(step_dir("two", 4) / "optimizer" / "shard-1-of-2.safetensors"));

  const auto one = read_jsonl(dir_ / "one" / "metrics.jsonl");
  const auto two = read_jsonl(dir_ / "two" / "metrics.jsonl");
  ASSERT_EQ(one.size(), 5u);
  ASSERT_EQ(two.size(), 5u);
  for (const auto& row : one) EXPECT_GT(row.at("samples").get<double>(), 0);  // every step trains
  expect_same_metrics(one, two);
  expect_same_weights(step_dir("two", 5), step_dir("one", 5));

  // Each of two ranks holds half the master weights and AdamW moments one rank holds.
  const double mib_one = one[0].at("memory/optimizer_mib").get<double>();
  const double mib_two = two[0].at("memory/optimizer_mib").get<double>();
  EXPECT_NEAR(mib_two / mib_one, 0.5, 1e-3) << mib_one << " vs " << mib_two;
  EXPECT_GT(two[0].at("time/comm").get<double>(), 0);

  // A two-rank checkpoint resumed on one rank, and the reverse, continue as the runs did.
  copy_checkpoint("two", 2, "two_then_one");
  r = rl("two_then_one", "--nproc 1 --resume");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "resuming at step 2");
  copy_checkpoint("one", 2, "one_then_two");
  r = rl("one_then_two", "--nproc 2 --resume");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* run : {"two_then_one", "one_then_two"}) {
    const auto resumed = read_jsonl(dir_ / run / "metrics.jsonl");
    ASSERT_EQ(resumed.size(), 3u) << run;
    expect_same_metrics(one, resumed, 2);
    expect_same_weights(step_dir(run, 5), step_dir("one", 5));
  }
}

// Whether a socket of this machine listens on TCP `port` (any address, IPv4 or IPv6), as
// /proc/net/tcp{,6} list them: "sl local_address(HEX_IP:HEX_PORT) rem_address st(0A = LISTEN) ...".
bool listening_on(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream rows(read_file(table));
    std::string row;
    std::getline(rows, row);  // the header
    while (std::getline(rows, row)) {
      std::istringstream fields(row);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const size_t colon = local.rfind(':');
      if (state == "0A" && colon != std::string::npos &&
          std::stoi(local.substr(colon + 1), nullptr, 16) == port)
        return true;
    }
  }
  return false;
}

TEST_F(DistributedCli, ARankThatFailsEndsEveryRankWithItsError) {
  // Two "machines" on loopback: rank 0, and a rank 1 whose model cannot be loaded. Rank 1 starts
  // once rank 0's store listens: started earlier, its connect() retries to the unbound port may
  // take that very port as their local one (a loopback self-connect), and rank 0 cannot bind.
  // Both wait at most 120 s for a peer, so that a failure here cannot hold CI for 15 minutes.
  const int port = test::free_port();
  const std::string rdzv = "127.0.0.1:" + std::to_string(port);
  const std::string timeout = "trainer.collective_timeout_s=120";
  test::TrellisProcess leader({"rl",
                               std::string(TRELLIS_SOURCE_DIR) + "/examples/reverse_text.toml",
                               "--set", "model.path=" + (dir_ / "base").string(), "--set", timeout,
                               "--run-dir", (dir_ / "failing").string(), "--threads", "1",
                               "--nnodes", "2", "--node-rank", "0", "--rdzv", rdzv});
  ASSERT_TRUE(wait_for([&] { return listening_on(port) || leader.exited(); }, 60));
  ASSERT_FALSE(leader.exited()) << leader.log();
  const auto follower = run_trellis("rl " + args((dir_ / "no-such-model").string()) + " --set " +
                                    timeout + " --nnodes 2 --node-rank 1 --rdzv " + rdzv);
  EXPECT_NE(follower.status, 0);
  EXPECT_CONTAINS(follower.output, "no-such-model");
  EXPECT_NE(leader.wait(std::chrono::seconds(60)), 0);
  const std::string log = leader.log();
  EXPECT_CONTAINS(log, "rank 1 failed");
  EXPECT_CONTAINS(log, "no-such-model");
}

// A second "machine" that never starts: rank 0 waits trainer.rendezvous_timeout_s for it, and
// names it. Before, Gloo's rendezvous waited out the collective time-out (900 s by default; 120
// here, so that a failure cannot hold CI) and said only that a key timed out. And a rank 1 whose
// rank 0 never starts gives up after the same rendezvous time-out.
TEST_F(DistributedCli, ARankThatNeverJoinsIsNamedAfterTheRendezvousTimeout) {
  const std::string flags =
      "--set trainer.collective_timeout_s=120 --set "
      "trainer.rendezvous_timeout_s=3 --nnodes 2 --rdzv 127.0.0.1:" +
      std::to_string(test::free_port());
  auto r = rl("alone", flags + " --node-rank 0");
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "rank 1 of 2 did not join within 3 s (trainer.rendezvous_timeout_s)");
  r = rl("follower_alone", flags + " --node-rank 1");
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "cannot join the trainer's ranks");
}

TEST_F(DistributedCli, RankFlagsAreChecked) {
  auto r = rl("bad1", "--nnodes 2");
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "--rdzv");
  r = rl("bad2", "--nnodes 2 --node-rank 2 --rdzv 127.0.0.1:1");
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "trainer.node_rank");
  r = rl("bad3", "--nnodes 2 --rdzv localhost");
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "HOST:PORT");
}

}  // namespace
}  // namespace trellis
