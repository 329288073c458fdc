// `trellis validate --file F --model DIR CONFIG`: the verdict a validator would give one file,
// offline, from the real binary. An honest file, generated here as `trellis infer` generates one
// (fixed data sampling for the node, the worker's engine with TOPLOC proofs, group advantages,
// rows signed by the node), is accepted with exit status 0; files a dishonest or hostile worker
// made are rejected with exit status 1, every reason printed, and no crash.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <limits>

#include "cli/run_cli.h"
#include "common/config.h"
#include "common/files.h"
#include "common/identity.h"
#include "engine/engine.h"
#include "env/registry.h"
#include "interop/duckdb_script.h"
#include "model/checkpoint.h"
#include "model/presets.h"
#include "model/prompting.h"
#include "pipeline/fixed_data_sampler.h"
#include "pipeline/partial_rollouts.h"
#include "pipeline/rollout_rows.h"
#include "rl/advantages.h"
#include "rl/rl_loop.h"
#include "rl/rollouts.h"
#include "rl/task_source.h"
#include "rollout/rollout_file.h"
#include "rollout/signing.h"
#include "toploc/proof_builder.h"
#include "validator/file_checks.h"
#include "validator/sample_checks.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;

class ValidateFile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("validate_file");
    fs::create_directories(dir_);
    model::init_model_dir(dir_ / "model", model::Arch::Qwen3, "tiny", 5);
    config_path_ = dir_ / "run.toml";
    write_file_atomic(config_path_,
                      "[run]\nseed = 7\n[env]\nname = \"reverse_text\"\ndifficulty = 1\n"
                      "[rl]\ngroup_size = 4\nmax_tokens = 24\n[infer]\ngroups_per_submission = 2\n"
                      "[compute]\ndtype = \"fp32\"\nthreads = 1\n");
    node_ = std::make_unique<Identity>(Identity::generate());
    rows_ = generate(*node_, /*step=*/1, /*submission=*/0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // What an honest worker of the run uploads for (node, step, submission), with policy version 0.
  static std::vector<rollout::RolloutRecord> generate(const Identity& node, int32_t step,
                                                      int32_t submission) {
    const Config config = Config::resolve({config_path_}, {});
    auto model = model::load_transformer(dir_ / "model", {torch::kCPU, torch::kFloat32});
    const auto prompting = model::Prompting::load(dir_ / "model", model->config());
    const auto rl = rl::RlLoopConfig::from_config(config);
    const auto environment = env::make_environment(config);
    const rl::TaskSource tasks(*environment, config, rl.seed);
    const pipeline::FixedDataSampler sampler(tasks, node.address(), config);
    auto options = rl::rollout_options(rl, config);
    auto drawn = sampler.draw(step, submission, 2);
    options.seed = sampler.seed(step, submission);
    toploc::ProofBuilder proofs;
    engine::Engine engine(
        *model, pipeline::worker_engine_options(config, false, prompting.tok.vocab_size()));
    options.proofs = &proofs;
    rl::feed_proofs(engine, proofs);
    auto groups = rl::generate_rollouts(engine, prompting, *environment, drawn, options);
    for (auto& g : groups) {
      std::vector<double> rewards;
      for (const auto& r : g.rollouts) rewards.push_back(r.reward);
      const auto adv = rl::group_advantages(rewards, rl.normalize_std);
      for (size_t i = 0; i < adv.size(); ++i) g.rollouts[i].advantage = adv[i];
    }
    return pipeline::to_records({"offline-run", node.address(), step, submission}, groups, drawn);
  }

  // Writes `rows` signed by `signer` and runs `trellis validate --file` on them.
  static CliResult validate(const std::vector<rollout::RolloutRecord>& rows, const Identity& signer,
                            const std::string& extra = "") {
    const fs::path file = next_file();
    write_file_atomic(file,
                      rollout::encode_rollout_file(rows, {}, rollout::sign_body_with(signer)));
    return validate(file, extra);
  }
  static CliResult validate(const fs::path& file, const std::string& extra = "") {
    return run_trellis("validate --file " + file.string() + " --model " +
                       (dir_ / "model").string() + " " + config_path_.string() + " " + extra);
  }
  static fs::path next_file() {
    static int files = 0;
    return dir_ / ("file_" + std::to_string(files++) + ".parquet");
  }

  static inline fs::path dir_, config_path_;
  static inline std::unique_ptr<Identity> node_;
  static inline std::vector<rollout::RolloutRecord> rows_;
};

TEST_F(ValidateFile, AnHonestFileIsAccepted) {
  ASSERT_EQ(rows_.size(), 8u);
  const auto r = validate(rows_, *node_);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "accepted");
  EXPECT_CONTAINS(r.output, "8 rows");
}

TEST_F(ValidateFile, ADishonestFileIsRejectedWithEveryReason) {
  // Inflated rewards in one group (bounds), and the sample seeds of another draw in the other
  // (data sampling): both reasons are printed.
  auto rows = rows_;
  rows[0].reward += 0.5f;
  rows[4].seed = rows[5].seed;
  auto r = validate(rows, *node_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "rejected");
  EXPECT_CONTAINS(r.output, "bounds: row 0");
  EXPECT_CONTAINS(r.output, "data sampling");
  // Signed by another key.
  r = validate(rows_, Identity::generate());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "signature:");
  // Not a rollout file at all.
  const fs::path junk = dir_ / "junk.parquet";
  write_file_atomic(junk, "PAR1 not a rollout file");
  r = run_trellis("validate --file " + junk.string() + " --model " + (dir_ / "model").string() +
                  " " + config_path_.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "schema:");
}

// The dishonest edits of the attack matrix (specs/toploc.md §7) that need no model, made by DuckDB,
// an independent Parquet writer (tests/interop/duckdb_rollouts.js edit), and signed as a cheating
// worker signs its file (sign_rollout_file keeps DuckDB's body): each is rejected with the reason
// of the check the matrix names. The honest rows, rewritten by DuckDB the same way, are accepted.
// The edits that need other weights (noisy, older, FP8, a cheaper model) are the attack suite's.
TEST_F(ValidateFile, DishonestEditsMadeByDuckDbAreRejectedWithTheirReasons) {
  const fs::path honest = next_file();
  write_file_atomic(honest,
                    rollout::encode_rollout_file(rows_, {}, rollout::sign_body_with(*node_)));
  const auto model = model::load_transformer(dir_ / "model", {torch::kCPU, torch::kFloat32});
  const auto prompting = model::Prompting::load(dir_ / "model", model->config());
  const auto stops = validator::stop_ids(prompting);
  const int32_t first_stop = *std::min_element(stops.begin(), stops.end());
  const Identity other = Identity::generate();
  // DuckDB's rewrite of the honest file with `edit`, signed by `signer`; empty if DuckDB failed.
  const auto edited = [&](const std::string& edit, const std::string& value,
                          const Identity& signer) {
    const fs::path duck = next_file(), out = next_file();
    const Json answer =
        run_duckdb("edit " + shell_quote(honest.string()) + " " + shell_quote(duck.string()) + " " +
                   edit + " " + shell_quote(value));
    if (answer.is_null()) return fs::path();
    write_file_atomic(out, rollout::sign_rollout_file(
                               read_file(duck), rollout::sign_body_with(signer), duck.string()));
    return out;
  };
  const std::string every_row = "--set validator.sample_fraction=1";

  // The honest rows, as DuckDB writes them.
  const fs::path copy = edited("copy", "", *node_);
  ASSERT_FALSE(copy.empty());
  auto r = validate(copy, every_row);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "accepted");

  struct Case {
    std::string edit, value;
    const Identity* signer;
    std::string flags;
    // Any of them: an edit made without the model leaves the proofs as they were, so TOPLOC
    // may name a changed completion before the sampling check does.
    std::vector<std::string> reasons;
  };
  const std::vector<Case> cases = {
      {"edited_tokens",
       std::to_string(first_stop),  // tokens shift among ordinary ones, below every stop token
       node_.get(),
       "",
       {"toploc:", "sampling:"}},
      {"truncated", "", node_.get(), "", {"termination:"}},
      {"early_eos",
       std::to_string(first_stop),
       node_.get(),
       "",
       {"termination:", "sampling:", "toploc:"}},
      {"cherry_picked", "", node_.get(), "", {"data sampling:"}},
      {"repeated_prompts", "", node_.get(), "", {"data sampling:"}},
      {"inflated_rewards", "", node_.get(), "", {"reward:", "bounds:"}},
      {"inflated_advantages", "", node_.get(), "", {"bounds:"}},
      {"wrong_proof_length", "", node_.get(), "", {"schema:"}},
      // The file of step 1 relabelled as step 6, uploaded for step 1 again.
      {"relabelled_step", "", node_.get(), "--step 1", {"step binding:"}},
      // The node's file as it is, uploaded by another node; then re-signed as the other's own.
      {"copy", "", node_.get(), "--node " + other.address(), {"step binding:", "signature:"}},
      {"another_node", other.address(), &other, "", {"data sampling:"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.edit + " " + c.flags);
    const fs::path file = edited(c.edit, c.value, *c.signer);
    ASSERT_FALSE(file.empty());
    r = validate(file, every_row + " " + c.flags);
    EXPECT_EQ(r.status, 1) << r.output;
    bool named = false;
    for (const auto& reason : c.reasons)
      named = named || r.output.find(reason) != std::string::npos;
    EXPECT_TRUE(named) << "rejected for another reason:\n" << r.output;
  }

  // A file DuckDB wrote, cut in half: not a rollout file.
  const fs::path cut = next_file();
  const std::string whole = read_file(copy);
  write_file_atomic(cut, whole.substr(0, whole.size() / 2));
  r = validate(cut, every_row);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "schema:");
}

TEST_F(ValidateFile, AnEditedCompletionFailsTheModelChecks) {
  // Every token but the last of group 1 edited: the file checks may still pass (a random model's
  // reward stays 0), the model checks (every row prefilled) do not.
  auto rows = rows_;
  for (auto& row : rows) {
    if (row.group_index != 1) continue;
    for (size_t i = 0; i + 1 < row.completion_tokens.size(); ++i) row.completion_tokens[i] ^= 1;
  }
  const auto r = validate(rows, *node_, "--set validator.sample_fraction=1");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(r.output.find("toploc:") != std::string::npos ||
              r.output.find("sampling:") != std::string::npos ||
              r.output.find("reward:") != std::string::npos ||
              r.output.find("termination:") != std::string::npos)
      << r.output;
}

TEST_F(ValidateFile, HostileRowsAreRejectedWithoutACrash) {
  for (const int32_t index : {-1, -2, std::numeric_limits<int32_t>::max()}) {
    auto rows = rows_;
    for (auto& row : rows)
      if (row.group_index == 0) row.group_index = index;
    const auto r = validate(rows, *node_);
    EXPECT_EQ(r.status, 1) << index << ": " << r.output;
    EXPECT_CONTAINS(r.output, "schema: row 0: group_index");
  }
  // Hostile draw coordinates in a C3PO++ task id.
  auto rows = rows_;
  for (auto& row : rows) row.task_id += "@1:0:4611686018427387904";
  auto r = validate(rows, *node_, "--set infer.partial_rollouts=true");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "data sampling:");
  // A token id outside the vocabulary.
  rows = rows_;
  rows[2].completion_tokens[0] = 1 << 30;
  r = validate(rows, *node_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "schema: row 2");
}

TEST_F(ValidateFile, TheTimeBudgetRejectsASlowFile) {
  const auto r = validate(rows_, *node_, "--set validator.max_file_seconds=0.000001");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "time budget:");
}

// The model checks on their own guard their input: a row that never went through the file checks
// (`trellis toploc verify`, or a caller that skipped them) is a finding, not a crash.
TEST_F(ValidateFile, TheModelChecksRangeCheckTheirRow) {
  auto model = model::load_transformer(dir_ / "model", {torch::kCPU, torch::kFloat32});
  const auto prompting = model::Prompting::load(dir_ / "model", model->config());
  const auto rules = validator::Rules::from_config(Config::resolve({config_path_}, {}), 0);
  const auto stops = validator::stop_ids(prompting);
  const int64_t vocab = prompting.tok.vocab_size();
  const validator::ModelOf model_of = [&](int64_t) -> model::Transformer& { return *model; };
  const auto findings = [&](const rollout::RolloutRecord& row) {
    return validator::check_sample(row, 0, rules, stops, vocab, model_of).findings;
  };
  ASSERT_TRUE(findings(rows_[0]).empty());
  auto row = rows_[0];
  row.completion_tokens[0] = static_cast<int32_t>(vocab);  // outside the vocabulary
  auto f = findings(row);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f.front().check, "schema");
  row = rows_[0];
  row.prompt_tokens[0] = -5;
  f = findings(row);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f.front().check, "schema");
  row = rows_[0];
  row.completion_logprobs.pop_back();  // one log-prob short
  f = findings(row);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f.front().check, "schema");
  row = rows_[0];
  row.token_versions.resize(1);
  f = findings(row);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f.front().check, "schema");
  row = rows_[0];
  row.completion_logprobs[0] = std::numeric_limits<float>::quiet_NaN();  // NaN passed the mean
  f = findings(row);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f.front().check, "schema");
}

}  // namespace
}  // namespace trellis::test
