// `trellis validate CONFIG`: the trusted validator role (validator/service.h);
// `trellis validate --file F --model DIR CONFIG`: the verdict the service would give one file,
// offline (validator::Validator, the same checks), every reason printed; and
// `trellis toploc verify`: the model checks of a rollout file offline, every row against one model.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/stop_signal.h"
#include "common/error.h"
#include "common/files.h"
#include "model/checkpoint.h"
#include "model/prompting.h"
#include "rollout/rollout_file.h"
#include "validator/file_checks.h"
#include "validator/sample_checks.h"
#include "validator/service.h"
#include "validator/validator.h"

namespace trellis::cli {
namespace {

struct VerifyFlags {
  std::string model, rollouts;
  std::vector<std::string> configs, overrides;
  ComputeOverrides compute;
};

// Checks every row of the file against `flags.model` (whatever version a row claims); prints one
// line per row and a summary. Returns the exit status: 0 when every row passes.
int toploc_verify(const VerifyFlags& flags) {
  std::vector<std::string> overrides = flags.overrides;
  flags.compute.apply(overrides);
  const Config config = Config::resolve(
      std::vector<std::filesystem::path>(flags.configs.begin(), flags.configs.end()), overrides);
  const model::Compute compute = setup_compute(config);
  auto model = model::load_transformer(flags.model, compute);
  const auto prompting = model::Prompting::load(flags.model, model->config());
  std::string bytes;
  const auto file = rollout::read_rollout_file(flags.rollouts, bytes);
  const auto rules = validator::Rules::from_config(config, 0);
  const auto stops = validator::stop_ids(prompting);
  const validator::ModelOf model_of = [&](int64_t) -> model::Transformer& { return *model; };
  int64_t failed = 0;
  std::vector<validator::SampleStats> all;
  toploc::ChunkStats worst;
  double distance = 0;
  for (size_t i = 0; i < file.rows.size(); ++i) {
    const auto& row = file.rows[i];
    if (row.completion_tokens.empty()) {
      std::printf("row %zu: empty completion\n", i);
      ++failed;
      continue;
    }
    const auto result =
        validator::check_sample(row, i, rules, stops, prompting.tok.vocab_size(), model_of);
    const auto w = validator::worst_chunk(result.stats.toploc);
    validator::keep_worst(worst, w);
    distance = std::max(distance, result.stats.max_sampling_distance);
    all.push_back(result.stats);
    std::string verdict = "ok";
    if (!result.findings.empty()) {
      ++failed;
      verdict.clear();
      for (const auto& f : result.findings) verdict += (verdict.empty() ? "" : "; ") + f.text();
    }
    std::printf(
        "row %zu: %lld tokens, %zu chunks, worst chunk %u exp / %.2f mean / %.0f median, "
        "sampling distance %.2g, log-prob error %.4f: %s\n",
        i, static_cast<long long>(result.stats.tokens), result.stats.toploc.chunks.size(),
        w.exp_mismatches, w.mant_err_mean, w.mant_err_median, result.stats.max_sampling_distance,
        result.stats.logprob_error, verdict.c_str());
  }
  const auto average = validator::average_chunks(all);
  const auto file_findings = validator::check_file_average(all, rules);
  for (const auto& f : file_findings) std::printf("file: %s\n", f.text().c_str());
  const bool average_ok = file_findings.empty();
  std::printf(
      "%zu rows, %lld failed; worst chunk %u exponent mismatches, mantissa error mean %.2f, "
      "median %.0f (thresholds %u / %.1f / %.1f); %lld chunks average %.2f (at most %.2f: %s); "
      "worst sampling distance %.2g (tolerance %g)\n",
      file.rows.size(), static_cast<long long>(failed), worst.exp_mismatches, worst.mant_err_mean,
      worst.mant_err_median, rules.thresholds.exp_mismatches, rules.thresholds.mant_err_mean,
      rules.thresholds.mant_err_median, static_cast<long long>(average.chunks),
      average.mant_err_mean, rules.toploc_file_mant_err_mean, average_ok ? "ok" : "FAIL", distance,
      rules.sampling_tolerance);
  return failed == 0 && average_ok ? 0 : 1;
}

// `trellis validate --file`: what the file says it is, unless a flag says otherwise.
struct OfflineFlags {
  std::string file, model, run_id, node;
  int64_t step = -1, submission = -1, policy_version = -1;  // -1: from the file
};

// The submission the file claims to be: run, node, step and submission of its first row, and the
// newest policy version any of its tokens claims (every row is then checked against them).
validator::Expected expected_of(const std::string& bytes, const OfflineFlags& flags) {
  validator::Expected e;
  try {
    const auto file = rollout::decode_rollout_file(bytes, flags.file);
    if (!file.rows.empty()) {
      const auto& r = file.rows.front();
      e = {r.run_id, r.node_address, r.step, r.submission, 0};
      for (const auto& row : file.rows)
        for (int32_t v : row.token_versions)
          e.policy_version = std::max<int64_t>(e.policy_version, v);
    }
  } catch (const std::exception&) {
    // validate() reports why the file does not decode.
  }
  if (!flags.run_id.empty()) e.run_id = flags.run_id;
  if (!flags.node.empty()) e.node_address = flags.node;
  if (flags.step >= 0) e.step = flags.step;
  if (flags.submission >= 0) e.submission = flags.submission;
  if (flags.policy_version >= 0) e.policy_version = flags.policy_version;
  return e;
}

// The verdict on one file with `flags.model` as every policy version it claims. Prints it with
// every finding; returns the exit status: 0 accepted, 1 rejected, 2 cannot judge.
int validate_file(const Config& config, const OfflineFlags& flags) {
  const model::Compute compute = setup_compute(config);
  auto model = model::load_transformer(flags.model, compute);
  const auto prompting = model::Prompting::load(flags.model, model->config());
  const validator::ModelOf model_of = [&](int64_t) -> model::Transformer& { return *model; };
  validator::Validator validator(
      config, prompting, model_of,
      {model->config().vocab_size, model->config().max_position_embeddings});
  const std::string bytes = read_file(flags.file);
  const auto expected = expected_of(bytes, flags);
  std::printf("%s: run %s, node %s, step %lld, submission %lld, policy version %lld\n",
              flags.file.c_str(), expected.run_id.c_str(), expected.node_address.c_str(),
              static_cast<long long>(expected.step), static_cast<long long>(expected.submission),
              static_cast<long long>(expected.policy_version));
  validator::Report report;
  try {
    report = validator.validate(bytes, expected);
  } catch (const validator::CannotJudge& e) {
    std::printf("cannot judge: %s\n", e.what());
    return 2;
  }
  for (const auto& f : report.findings) std::printf("  %s\n", f.text().c_str());
  std::printf("%s: %s\n", report.accepted ? "accepted" : "rejected", report.summary().c_str());
  std::fflush(stdout);
  return report.accepted ? 0 : 1;
}

}  // namespace

void add_validate_commands(CLI::App& app) {
  static RunFlags validate_flags;
  static OfflineFlags offline;
  auto* validate = app.add_subcommand(
      "validate",
      "Validator: check each submission (schema, data sampling, rewards, TOPLOC, sampling) and "
      "post accept or reject to the orchestrator");
  add_run_flags(validate, validate_flags);
  validate
      ->add_option("--file", offline.file,
                   "judge this rollout file offline (no orchestrator): print the verdict a "
                   "validator would give it and every reason; exit status 0 accept, 1 reject")
      ->check(CLI::ExistingFile);
  validate
      ->add_option("--model", offline.model,
                   "with --file: the policy every version of the file is checked against (a model "
                   "directory)")
      ->check(CLI::ExistingDirectory);
  validate->add_option("--run-id", offline.run_id, "with --file: the run (default: the file's)");
  validate->add_option("--node", offline.node,
                       "with --file: the node address that must have signed it (default: the "
                       "file's)");
  validate->add_option("--step", offline.step, "with --file: the step (default: the file's)");
  validate->add_option("--submission", offline.submission,
                       "with --file: the submission number (default: the file's)");
  validate->add_option("--policy-version", offline.policy_version,
                       "with --file: the newest published policy version (default: the newest "
                       "the file claims)");
  validate->callback([] {
    if (!offline.file.empty()) {
      if (offline.model.empty())
        fail("--model", "`trellis validate --file` needs the policy's model directory");
      const int status = validate_file(validate_flags.resolve(), offline);
      if (status != 0) std::exit(status);
      return;
    }
    const Config config = validate_flags.resolve();
    const auto& stop = stop_requested();
    const model::Compute compute = setup_compute(config);
    const std::filesystem::path dir = config.get<std::string>("run.dir");
    if (dir.empty())
      fail("--run-dir",
           "`trellis validate` needs a directory for its key and the policies it reads");
    std::filesystem::create_directories(dir);
    validator::run_validator(config, dir, compute, stop);
  });

  static VerifyFlags verify_flags;
  auto* toploc = app.add_subcommand("toploc", "TOPLOC proofs of inference");
  toploc->require_subcommand(1);
  auto* verify = toploc->add_subcommand(
      "verify",
      "Check every row of a rollout file against a model: TOPLOC proof, verifiable sampling, "
      "termination (exit status 1 when a row fails)");
  verify->add_option("--model", verify_flags.model, "the policy the rows claim (a model directory)")
      ->required()
      ->check(CLI::ExistingDirectory);
  verify->add_option("--rollouts", verify_flags.rollouts, "a rollout file (.parquet)")
      ->required()
      ->check(CLI::ExistingFile);
  verify
      ->add_option("config", verify_flags.configs,
                   "TOML configuration files of the run (sampling, thresholds), left to right")
      ->check(CLI::ExistingFile);
  verify->add_option("--set", verify_flags.overrides, "override one key: section.key=value");
  verify_flags.compute.add_to(verify);
  verify->callback([] {
    const int status = toploc_verify(verify_flags);
    if (status != 0) std::exit(status);
  });
}

}  // namespace trellis::cli
