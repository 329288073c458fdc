// End-to-end tests of `trellis env list | sample | score`, `trellis eval` and `trellis filter` as a
// user runs them: real binary, real files, a real (tiny, random) model.
#include <cmath>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "common/files.h"
#include "common/json.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kEnvironments = {"math",       "code",         "countdown",
                                                "arithmetic", "reverse_text", "sort",
                                                "sudoku",     "maze",         "knights_knaves"};

class EnvCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("env");
    fs::create_directories(dir_);
    auto r = run_trellis("model init --arch qwen2 --preset tiny --seed 2 --out " +
                         (dir_ / "model").string());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static fs::path dir_;
};
fs::path EnvCli::dir_;

TEST_F(EnvCli, ListNamesEveryEnvironment) {
  auto r = run_trellis("env list");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const auto& name : kEnvironments) EXPECT_CONTAINS(r.output, name + " ");
}

TEST_F(EnvCli, SampleIsDeterministic) {
  auto a = run_trellis("env sample --env maze --n 3 --seed 5", false);
  auto b = run_trellis("env sample --env maze --n 3 --seed 5", false);
  auto c = run_trellis("env sample --env maze --n 3 --seed 6", false);
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output, c.output);
  const fs::path tasks = dir_ / "maze.jsonl";
  write_file_atomic(tasks, a.output);
  EXPECT_EQ(read_jsonl(tasks).size(), 3u);
  // --out writes the same tasks.
  auto out =
      run_trellis("env sample --env maze --n 3 --seed 5 --out " + (dir_ / "out.jsonl").string());
  ASSERT_EQ(out.status, 0) << out.output;
  EXPECT_EQ(read_file(dir_ / "out.jsonl"), a.output);
}

// For every environment: its reference solution scores 1 through `env score` (given inline and
// through a file), and a reply without an answer scores 0 with a reason.
TEST_F(EnvCli, ScoreAgreesWithTheSolution) {
  for (const auto& name : kEnvironments) {
    SCOPED_TRACE(name);
    auto sample = run_trellis("env sample --env " + name + " --n 2 --seed 5", false);
    ASSERT_EQ(sample.status, 0) << sample.output;
    const fs::path tasks = dir_ / (name + ".jsonl");
    write_file_atomic(tasks, sample.output);
    const auto rows = read_jsonl(tasks);
    ASSERT_EQ(rows.size(), 2u);
    const std::string id = rows[1]["task_id"];
    const std::string solution = rows[1]["solution"];
    auto good = run_trellis("env score --task " + tasks.string() + " --task-id " + id +
                            " --completion " + quoted(solution));
    ASSERT_EQ(good.status, 0) << good.output;
    EXPECT_CONTAINS(good.output, "reward 1\n");
    write_file_atomic(dir_ / "reply.txt", "I am not sure.");
    auto bad = run_trellis("env score --env " + name + " --task " + tasks.string() + " --task-id " +
                           id + " --completion-file " + (dir_ / "reply.txt").string());
    ASSERT_EQ(bad.status, 0) << bad.output;
    EXPECT_CONTAINS(bad.output, "reward 0\nreason ");
  }
}

TEST_F(EnvCli, ScoreErrorsNameTheProblem) {
  const fs::path tasks = dir_ / "bad.jsonl";
  write_file_atomic(tasks,
                    "{\"task_id\": \"a\", \"env\": \"math\", \"prompt\": \"1+1?\", "
                    "\"verification_info\": {\"ground_truth\": \"2\"}}\n"
                    "{\"task_id\": \"b\", \"env\": \"math\", \"prompt\": \"x\", "
                    "\"verification_info\": {\"ground_truth\": 2}}\n");
  auto r = run_trellis("env score --task " + tasks.string() + " --task-id a --completion 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, tasks.string() + ":2");
  EXPECT_CONTAINS(r.output, "ground_truth");

  write_file_atomic(tasks,
                    "{\"task_id\": \"a\", \"env\": \"math\", \"prompt\": \"1+1?\", "
                    "\"verification_info\": {\"ground_truth\": \"2\"}}\nnot json\n");
  r = run_trellis("env score --task " + tasks.string() + " --completion 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, tasks.string() + ":2");

  r = run_trellis("env sample --env chess");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "no environment named 'chess'; known: math, code");

  r = run_trellis("env sample --env sort --difficulty 11");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "difficulty must be in [1, 10]");
}

// eval end to end: every sample's reward is what `env score` says of its text, pass@k follows the
// per-task counts, and the length penalty is R_task - alpha * |T - tokens|.
TEST_F(EnvCli, EvalScoresEverySampleWithTheVerifier) {
  const fs::path out = dir_ / "eval.jsonl";
  auto r = run_trellis("eval --model " + (dir_ / "model").string() +
                           " --env reverse_text --n 4 --k 3 --max-tokens 12 --seed 1 --difficulty 1"
                           " --set env.length.targets=[6] --set env.length.alpha=0.01 --out " +
                           out.string(),
                       false);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "reverse_text: 4 tasks x 3 samples");
  EXPECT_CONTAINS(r.output, "pass@1");
  EXPECT_CONTAINS(r.output, "pass@3");
  auto rows = read_jsonl(out);
  ASSERT_EQ(rows.size(), 4u);
  const auto tasks =
      run_trellis("env sample --env reverse_text --n 4 --seed 1 --difficulty 1", false);
  write_file_atomic(dir_ / "rt.jsonl", tasks.output);
  for (const auto& row : rows) {
    ASSERT_EQ(row["samples"].size(), 3u);
    EXPECT_EQ(row["length_target"], 6);
    int passed = 0;
    for (const auto& s : row["samples"]) {
      const double task_reward = s["task_reward"];
      EXPECT_GE(task_reward, 0.0);
      EXPECT_LE(task_reward, 1.0);
      passed += task_reward == 1.0;
      const int64_t tokens = s["tokens"];
      EXPECT_LE(tokens, 12);
      EXPECT_NEAR(s["reward"].get<double>(), task_reward - 0.01 * std::abs(6 - tokens), 1e-9);
      write_file_atomic(dir_ / "sample.txt", s["text"].get<std::string>());
      auto again = run_trellis("env score --task " + (dir_ / "rt.jsonl").string() + " --task-id " +
                                   row["task_id"].get<std::string>() + " --completion-file " +
                                   (dir_ / "sample.txt").string(),
                               false);
      EXPECT_CONTAINS(again.output, "reason " + s["reason"].get<std::string>());
    }
    EXPECT_EQ(row["passed"], passed);
    EXPECT_DOUBLE_EQ(row["pass@1"].get<double>(), passed / 3.0);
  }
}

TEST_F(EnvCli, FilterKeepsTasksByPassRate) {
  const fs::path tasks = dir_ / "filter_in.jsonl";
  auto sample = run_trellis("env sample --env arithmetic --n 5 --seed 2", false);
  write_file_atomic(tasks, sample.output);
  const std::string base = "filter --model " + (dir_ / "model").string() + " --env arithmetic" +
                           " --tasks " + tasks.string() + " --k 2 --max-tokens 4";
  // A random model solves nothing: every task has pass rate 0.
  auto none = run_trellis(base + " --out " + (dir_ / "kept.jsonl").string(), false);
  ASSERT_EQ(none.status, 0) << none.output;
  EXPECT_CONTAINS(none.output, "0/2       5 tasks\n");
  EXPECT_CONTAINS(none.output, "kept 0 of 5 tasks");
  EXPECT_EQ(read_file(dir_ / "kept.jsonl"), "");
  auto all = run_trellis(base + " --low 0 --high 0 --out " + (dir_ / "kept.jsonl").string(), false);
  ASSERT_EQ(all.status, 0) << all.output;
  EXPECT_CONTAINS(all.output, "kept 5 of 5 tasks");
  auto kept = read_jsonl(dir_ / "kept.jsonl");
  auto original = read_jsonl(tasks);
  ASSERT_EQ(kept.size(), 5u);
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i]["metadata"]["pass_rate"], 0.0);
    kept[i]["metadata"].erase("pass_rate");
    EXPECT_EQ(kept[i], original[i]);
  }
}

TEST_F(EnvCli, EvalRejectsAMalformedTaskLine) {
  const fs::path tasks = dir_ / "malformed.jsonl";
  auto sample = run_trellis("env sample --env sort --n 2 --seed 2", false);
  write_file_atomic(tasks, sample.output + "{\"task_id\": \"x\", \"env\": \"sort\"}\n");
  auto r = run_trellis("eval --model " + (dir_ / "model").string() + " --env sort --tasks " +
                       tasks.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, tasks.string() + ":3");
  EXPECT_CONTAINS(r.output, "missing field 'prompt'");
  r = run_trellis("eval --model " + (dir_ / "model").string() + " --env math --tasks " +
                  tasks.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "is for environment 'sort', not 'math'");
}

}  // namespace
}  // namespace trellis::test
