// End-to-end tests of `trellis rl` as a user runs it: the README's example (a tiny model
// warm-started with `trellis sft` on reverse_text) raises the reward, on its training batches and
// on a fixed evaluation set, printing one line per step and logging every metric; a run resumes to
// exactly the steps it would have taken; a sampling mismatch injected for experiments, and the
// one of an FP8 engine beside a bf16 trainer, show in the metrics; and a bad configuration names
// its key.
#include <cstdio>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "common/files.h"
#include "common/json.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;

// RL steps of the learning run, and the least reward gains it must show.
constexpr int kSteps = 40;
constexpr double kTrainMargin = 0.02, kEvalSetMargin = 0.02;

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

  // The README's example, with no evaluation during SFT and checkpoints only at the end, on one
  // thread: tests run two at a time on 2 cores, and OpenMP threads that share a core with another
  // test spin each other down (sleeping ones, OMP_WAIT_POLICY=passive, make this model 3x slower).
  static std::string example() {
    return std::string(TRELLIS_SOURCE_DIR) + "/examples/reverse_text.toml";
  }
  static std::string config() {
    return example() +
           " --set sft.eval_tasks=0 --set compute.threads=1 --set trainer.checkpoint_every=0";
  }
  // Mean reward of 8 samples (temperature 1, as RL samples) on each of 100 tasks drawn with their
  // own seed (the words recur: difficulty 1 draws from 213): a fixed set, so before and after
  // compare the policies and not the luck of a batch.
  static double eval_set_reward(const fs::path& model) {
    const auto r = run_trellis("eval --model " + model.string() + " --config " + example() +
                               " --n 100 --k 8 --max-tokens 32 --seed 991 --threads 1");
    EXPECT_EQ(r.status, 0) << r.output;
    const auto at = r.output.find("\nreward ");
    if (at == std::string::npos) {
      ADD_FAILURE() << "no reward line in:\n" << r.output;
      return 0;
    }
    return std::stod(r.output.substr(at + 8));
  }
  static double mean_of(const std::vector<Json>& rows, size_t lo, size_t hi, const char* key) {
    double sum = 0;
    for (size_t i = lo; i < hi; ++i) sum += rows[i][key].get<double>();
    return sum / static_cast<double>(hi - lo);
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
TEST_F(RlCli, WarmStartedRunRaisesRewardAndResumesExactly) {
  ASSERT_NO_FATAL_FAILURE(warm_start());
  const int steps = kSteps;
  auto r = run_trellis(rl("learn", "--set rl.steps=" + std::to_string(steps)));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(step_lines(r.output).size(), static_cast<size_t>(steps)) << r.output;
  EXPECT_CONTAINS(r.output, "step 0/" + std::to_string(steps) + " | reward ");

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
  EXPECT_EQ(rows[steps - 1]["staleness/max"].get<double>(), 1.0);
  for (const auto& row : rows) {
    EXPECT_GT(row["samples"].get<double>(), 0) << "a step without groups that carry signal";
    EXPECT_GE(row["reward/task"].get<double>(), 0);
    EXPECT_LE(row["reward/task"].get<double>(), 1);
    EXPECT_LT(row["mismatch/k3"].get<double>(), 0.1);  // engine and trainer agree
  }
  const fs::path trained = dir_ / "learn" / "checkpoints" / ("step_" + std::to_string(steps));
  EXPECT_TRUE(fs::exists(trained));

  // The reward rises. With these seeds this machine measured 0.493 -> 0.564 on the training
  // batches (first vs last 10 steps) and 0.457 -> 0.536 on the fixed evaluation set; the margins
  // are under a third of that, for other CPUs and libraries.
  const double first = mean_of(rows, 0, 10, "reward/task");
  const double last = mean_of(rows, steps - 10, steps, "reward/task");
  EXPECT_GT(last - first, kTrainMargin) << "training reward " << first << " -> " << last;
  const double before = eval_set_reward(warm()), after = eval_set_reward(trained);
  std::printf("reward over %d steps: training batches %.3f -> %.3f, evaluation set %.3f -> %.3f\n",
              steps, first, last, before, after);
  EXPECT_GT(after - before, kEvalSetMargin)
      << "evaluation-set reward " << before << " -> " << after;

  // rl.behaviour_temperature (the mismatch experiment's knob) makes the engine sample from another
  // distribution than the trainer scores: step 0's mismatch k3, ~1e-5 when the two agree (bf16
  // engine, fp32 trainer), becomes large.
  r = run_trellis(rl("hotter", "--set rl.steps=1 --set rl.behaviour_temperature=1.5"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_LT(rows[0]["mismatch/k3"].get<double>(), 1e-3);
  EXPECT_GT(read_jsonl(dir_ / "hotter" / "metrics.jsonl").at(0)["mismatch/k3"].get<double>(), 1e-2);

  // rl.precision (docs/fp8.md): an engine in FP8 beside a trainer in bf16 (fp8-rollout, two
  // forward graphs) shows a mismatch at step 0 well above bf16's (13x here); the unified flow
  // (fp8: the trainer runs the engine's FP8 graph) has less of it (2-3x less here).
  std::map<std::string, double> k3;
  for (const std::string mode : {"fp8-rollout", "fp8"}) {
    r = run_trellis(rl(mode, "--set rl.steps=1 --set rl.precision=" + mode));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_CONTAINS(r.output, "in " + mode);
    k3[mode] = read_jsonl(dir_ / mode / "metrics.jsonl").at(0)["mismatch/k3"].get<double>();
  }
  EXPECT_GT(k3["fp8-rollout"], 4 * rows[0]["mismatch/k3"].get<double>());
  EXPECT_LT(k3["fp8"], k3["fp8-rollout"] / 1.5);

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
  r = run_trellis(rl("bad5", "--set rl.precision=fp4"));
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "rl.precision");
  r = run_trellis(rl("bad4", "--set rl.stepz=3"));
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "rl.stepz");
  r = run_trellis("rl " + config() + " --set model.path=" + warm().string() + " --resume");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "--run-dir");
}

}  // namespace
}  // namespace trellis::test
