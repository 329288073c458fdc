// End-to-end tests of `trellis sft` as a user runs it: a tiny random model learns from the
// reverse_text environment's reference solutions (one console line and one metrics.jsonl row per
// step, evaluations, checkpoints, a final model that `trellis eval` loads), a resumed run ends with
// exactly the weights of an uninterrupted one, and mistakes in the configuration are named.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "common/files.h"
#include "common/json.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;

// --set key="value" for a string key.
std::string set_string(const std::string& key, const std::string& value) {
  return "--set " + quoted(key + "=\"" + value + "\"");
}

class SftCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("sft");
    fs::create_directories(dir_);
    auto r = run_trellis("model init --preset tiny --seed 1 --out " + (dir_ / "model").string());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // A short run on reverse_text at difficulty 1 with a learning rate a tiny model learns at, on one
  // thread (tests run two at a time on 2 cores; see rl_cli_test.cpp).
  static std::string base_args() {
    return "sft " + set_string("model.path", (dir_ / "model").string()) +
           " --set env.name='\"reverse_text\"' --set env.difficulty=1 --set compute.threads=1" +
           " --set sft.batch_size=8 --set sft.lr=3e-3 --set sft.warmup_steps=2" +
           " --set sft.eval_tasks=0";
  }
  static fs::path dir_;
};
fs::path SftCli::dir_;

TEST_F(SftCli, TrainsEvaluatesCheckpointsAndWritesTheModel) {
  const fs::path run = dir_ / "run", out = dir_ / "out";
  auto r = run_trellis(base_args() +
                       " --set sft.steps=8 --set sft.eval_every=4 --set sft.eval_tasks=4"
                       " --set rl.max_tokens=24 --set trainer.checkpoint_every=3"
                       " --set trainer.keep_checkpoints=2 " +
                       set_string("sft.out", out.string()) + " --run-dir " + run.string());
  ASSERT_EQ(r.status, 0) << r.output;

  // One console line per step, evaluations on steps 4 and 8.
  const auto lines = step_lines(r.output);
  ASSERT_EQ(lines.size(), 8u) << r.output;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(lines[i].rfind("step " + std::to_string(i + 1) + "/8 | loss ", 0), 0u) << lines[i];
    EXPECT_CONTAINS(lines[i], "grad norm");
    EXPECT_CONTAINS(lines[i], "tok/s");
  }
  EXPECT_CONTAINS(lines[3], "eval pass");
  EXPECT_CONTAINS(lines[7], "eval pass");
  EXPECT_EQ(lines[4].find("eval pass"), std::string::npos);

  // The same numbers in metrics.jsonl.
  const auto rows = read_jsonl(run / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 8u);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["step"], i + 1);
    for (const char* key : {"loss", "grad_norm", "lr", "throughput/train_tok_s", "time/step"}) {
      EXPECT_TRUE(rows[i].contains(key) && rows[i][key].is_number()) << key << " " << rows[i];
    }
  }
  for (size_t i : {3u, 7u}) {
    for (const char* key : {"eval/reward", "eval/pass"}) {
      ASSERT_TRUE(rows[i].contains(key)) << rows[i];
      EXPECT_GE(rows[i][key].get<double>(), 0.0);
      EXPECT_LE(rows[i][key].get<double>(), 1.0);
    }
  }
  EXPECT_EQ(rows[0]["lr"].get<double>(), 1.5e-3);  // warm-up: 3e-3 * 1/2
  EXPECT_EQ(rows[7]["lr"].get<double>(), 3e-3);
  // Learning: the loss of a random model (~ln 264) falls.
  EXPECT_LT(rows[7]["loss"].get<double>(), 0.8 * rows[0]["loss"].get<double>()) << rows[0] << "\n"
                                                                                << rows[7];

  // Checkpoints at 3 and 6 and the end, the newest two kept; the resolved config saved.
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step_3"));
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_6" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_8" / "optimizer" / "index.json"));
  EXPECT_TRUE(fs::exists(run / "config.toml"));

  // The final model is a complete model directory that `trellis eval` runs.
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"}) {
    EXPECT_TRUE(fs::exists(out / file)) << file;
  }
  EXPECT_EQ(read_file(out / "model.safetensors"),
            read_file(run / "checkpoints" / "step_8" / "model.safetensors"));
  auto eval = run_trellis("eval --model " + out.string() +
                          " --env reverse_text --difficulty 1 --n 2 --max-tokens 8 --threads 2");
  ASSERT_EQ(eval.status, 0) << eval.output;
  EXPECT_CONTAINS(eval.output, "pass@1");

  // A fresh run refuses a run directory with checkpoints.
  auto again = run_trellis(base_args() + " --set sft.steps=1 --run-dir " + run.string());
  EXPECT_NE(again.status, 0);
  EXPECT_CONTAINS(again.output, "--resume");
}

// 4 steps straight, or 2 then --resume to 4 (with the run directory's saved config): the same
// losses and bit-identical weights (fp32 compute).
TEST_F(SftCli, ResumedRunEqualsAnUninterruptedOne) {
  const std::string args = base_args() + " --set compute.dtype='\"fp32\"' --set sft.batch_size=4";
  const fs::path a = dir_ / "straight", b = dir_ / "resumed";
  auto ra = run_trellis(args + " --set sft.steps=4 --run-dir " + a.string());
  ASSERT_EQ(ra.status, 0) << ra.output;
  auto rb1 = run_trellis(args + " --set sft.steps=2 --run-dir " + b.string());
  ASSERT_EQ(rb1.status, 0) << rb1.output;
  auto rb2 = run_trellis("sft --resume --set sft.steps=4 --run-dir " + b.string());
  ASSERT_EQ(rb2.status, 0) << rb2.output;
  EXPECT_CONTAINS(rb2.output, "step 3/4");
  EXPECT_EQ(rb2.output.find("step 2/4"), std::string::npos) << rb2.output;

  EXPECT_EQ(read_file(a / "checkpoints" / "step_4" / "model.safetensors"),
            read_file(b / "checkpoints" / "step_4" / "model.safetensors"));
  const auto rows_a = read_jsonl(a / "metrics.jsonl"), rows_b = read_jsonl(b / "metrics.jsonl");
  ASSERT_EQ(rows_a.size(), 4u);
  ASSERT_EQ(rows_b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rows_b[i]["step"], i + 1);
    EXPECT_EQ(rows_a[i]["loss"], rows_b[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(rows_a[i]["lr"], rows_b[i]["lr"]) << "step " << i + 1;
  }
}

TEST_F(SftCli, TrainsOnAJsonlFileAndNamesItsBadLine) {
  const fs::path data = dir_ / "pairs.jsonl";
  std::string text;
  for (int i = 0; i < 6; ++i) {
    text += "{\"prompt\": \"Say " + std::to_string(i) + "\", \"completion\": \"" +
            std::to_string(i) + "\"}\n";
  }
  write_file_atomic(data, text);
  auto r = run_trellis(base_args() + " " + set_string("sft.data", data.string()) +
                       " --set sft.steps=2 --run-dir " + (dir_ / "jsonl").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(step_lines(r.output).size(), 2u) << r.output;

  write_file_atomic(data, text + "{\"prompt\": \"x\"}\n");
  r = run_trellis(base_args() + " " + set_string("sft.data", data.string()) +
                  " --set sft.steps=2 --run-dir " + (dir_ / "jsonl_bad").string());
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "pairs.jsonl:7");
  EXPECT_CONTAINS(r.output, "completion");
}

TEST_F(SftCli, ConfigurationMistakesNameTheKey) {
  const std::string run = " --run-dir " + (dir_ / "bad").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --set sft.steps=-1", "sft.steps"},
      {" --set sft.batch_size=0", "sft.batch_size"},
      {" --set sft.lr=0", "sft.lr"},
      {" --set sft.nope=1", "sft.nope"},
      {" --set trainer.micro_batch_tokens=0", "trainer.micro_batch_tokens"},
      {" --set env.difficulty=11", "env.difficulty"},
      {" --set env.name='\"nope\"'", "nope"},
  };
  for (const auto& [flag, key] : cases) {
    SCOPED_TRACE(flag);
    auto r = run_trellis(base_args() + flag + run);
    EXPECT_NE(r.status, 0);
    EXPECT_CONTAINS(r.output, "error:");
    EXPECT_CONTAINS(r.output, key);
  }
  auto no_model = run_trellis("sft --set sft.steps=1" + run);
  EXPECT_NE(no_model.status, 0);
  EXPECT_CONTAINS(no_model.output, "model.path");
  auto no_checkpoint = run_trellis(base_args() + " --resume" + run);
  EXPECT_NE(no_checkpoint.status, 0);
  EXPECT_CONTAINS(no_checkpoint.output, "no checkpoint");
  auto no_dir = run_trellis(base_args() + " --resume");
  EXPECT_NE(no_dir.status, 0);
  EXPECT_CONTAINS(no_dir.output, "--run-dir");
}

}  // namespace
}  // namespace trellis::test
