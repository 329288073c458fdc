// End-to-end tests of `trellis rl` as a user runs it: a tiny model warm-started with `trellis sft`
// on reverse_text trains with RL, printing one line per step and logging every metric, resumes to
// exactly the steps it would have taken, and a bad configuration names its key.
// (Not asserted yet: that the reward rises. On this model and task it has not risen clearly
// within CI-sized runs; see the issue notes.)
#include <sstream>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "common/files.h"
#include "common/json.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;

class RlCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("rl");
    fs::create_directories(dir_);
  }
  // The warm start: a tiny model trained by `trellis sft` on reverse_text (made once, and only by
  // the test that needs it, since each test runs in a process of its own).
  static void warm_start() {
    auto r = run_trellis("model init --preset tiny --seed 1 --out " + (dir_ / "base").string());
    ASSERT_EQ(r.status, 0) << r.output;
    r = run_trellis("sft " + config() + " --set model.path=" + (dir_ / "base").string() +
                    " --set sft.out=" + warm().string() + " --run-dir " + (dir_ / "sft").string());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // The README's example, with a shorter warm start and checkpoints only at the end.
  static std::string config() {
    return std::string(TRELLIS_SOURCE_DIR) +
           "/examples/reverse_text.toml --set sft.steps=100 --set sft.eval_tasks=0"
           " --set compute.threads=2 --set trainer.checkpoint_every=0";
  }
  static fs::path warm() { return dir_ / "warm"; }
  static std::string rl(const std::string& run, const std::string& extra) {
    return "rl " + config() + " --set model.path=" + warm().string() + " --run-dir " +
           (dir_ / run).string() + " " + extra;
  }
  static fs::path dir_;
};
fs::path RlCli::dir_;

// One test, so that the warm start is trained once.
TEST_F(RlCli, WarmStartedRunLogsEveryStepAndResumesExactly) {
  ASSERT_NO_FATAL_FAILURE(warm_start());
  const int steps = 6;
  auto r = run_trellis(rl("learn", "--set rl.steps=" + std::to_string(steps)));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(step_lines(r.output).size(), static_cast<size_t>(steps)) << r.output;
  EXPECT_CONTAINS(r.output, "step 0/6 | reward ");

  const auto rows = read_jsonl(dir_ / "learn" / "metrics.jsonl");
  ASSERT_EQ(rows.size(), static_cast<size_t>(steps));
  for (const char* key : {"reward/mean",
                          "reward/task",
                          "reward/length_penalty",
                          "seq_len/mean",
                          "seq_len/max",
                          "truncated/frac",
                          "loss",
                          "entropy",
                          "grad_norm",
                          "clip/low_frac",
                          "clip/high_frac",
                          "clip/delta_frac",
                          "mismatch/k3",
                          "mismatch/masked_low_frac",
                          "mismatch/masked_high_frac",
                          "staleness/mean",
                          "staleness/max",
                          "filter/zero_adv_groups",
                          "time/wait_for_data",
                          "time/step",
                          "throughput/train_tok_s",
                          "throughput/mfu",
                          "throughput/rollout_tok_s"}) {
    EXPECT_TRUE(rows.back().contains(key)) << key;
  }
  // Async level 1: step 0 trains on the initial policy's rollouts, later steps on 1-step-old ones.
  EXPECT_EQ(rows[0]["staleness/max"].get<double>(), 0.0);
  EXPECT_EQ(rows[5]["staleness/max"].get<double>(), 1.0);
  for (const auto& row : rows) {
    EXPECT_GT(row["samples"].get<double>(), 0) << "a step without groups that carry signal";
    EXPECT_GE(row["reward/task"].get<double>(), 0);
    EXPECT_LE(row["reward/task"].get<double>(), 1);
    EXPECT_LT(row["mismatch/k3"].get<double>(), 0.1);  // engine and trainer agree
  }
  EXPECT_TRUE(fs::exists(dir_ / "learn" / "checkpoints" / ("step_" + std::to_string(steps))));

  // A run that stopped right after its step-2 checkpoint (simulated by copying that checkpoint
  // into a fresh run directory) resumes to exactly the steps 2 and 3 of the run that never
  // stopped: the same rollouts (the pending async batch travels in the checkpoint), the same
  // updates, the same final weights.
  r = run_trellis(rl("straight",
                     "--set rl.batch_size=16 --set rl.group_size=4 "
                     "--set trainer.checkpoint_every=2 --set rl.steps=4"));
  ASSERT_EQ(r.status, 0) << r.output;
  fs::create_directories(dir_ / "resumed" / "checkpoints");
  fs::copy(dir_ / "straight" / "checkpoints" / "step_2",
           dir_ / "resumed" / "checkpoints" / "step_2", fs::copy_options::recursive);
  r = run_trellis(rl("resumed",
                     "--set rl.batch_size=16 --set rl.group_size=4 "
                     "--set trainer.checkpoint_every=2 --set rl.steps=4 --resume"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "resuming at step 2");
  EXPECT_EQ(step_lines(r.output).size(), 2u) << r.output;

  const auto a = read_jsonl(dir_ / "straight" / "metrics.jsonl");
  const auto b = read_jsonl(dir_ / "resumed" / "metrics.jsonl");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 2u);
  for (int s = 2; s < 4; ++s) {
    EXPECT_EQ(b[s - 2]["step"].get<int>(), s);
    for (const char* key : {"reward/mean", "loss", "grad_norm", "entropy", "mismatch/k3"}) {
      EXPECT_EQ(a[s][key].get<double>(), b[s - 2][key].get<double>()) << key << " at step " << s;
    }
  }
  EXPECT_TRUE(read_file(dir_ / "straight" / "checkpoints" / "step_4" / "model.safetensors") ==
              read_file(dir_ / "resumed" / "checkpoints" / "step_4" / "model.safetensors"));
}

TEST_F(RlCli, BadConfigurationNamesTheKey) {
  auto r = run_trellis(rl("bad1", "--set rl.batch_size=10"));  // not a multiple of group_size 8
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "rl.batch_size");
  r = run_trellis(rl("bad2", "--set loss.mismatch=icepopp"));
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "loss.mismatch");
  r = run_trellis(rl("bad3", "--set loss.clip_delta=1.1"));  // must exceed 1 + eps
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "loss.clip_delta");
  r = run_trellis(rl("bad4", "--set rl.stepz=3"));
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "rl.stepz");
  r = run_trellis("rl " + config() + " --set model.path=" + warm().string() + " --resume");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "--run-dir");
}

}  // namespace
}  // namespace trellis::test
