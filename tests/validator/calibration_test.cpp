// Calibration (validator/calibration.h) on a tiny random model: honest completions generated as a
// worker generates them, under two settings that change the numerics (a batch of 4 with the
// default paged cache, and a tight cache that preempts and re-prefills), pass the validator's
// model checks with the default rules (four at a time, in one packed forward, as a validator
// checks a file); the same completions checked against another model's weights fail TOPLOC, and
// against 1% noise fail the file-wide mean; a worker rolling out in another precision than the
// run's (FP8 or not) is caught. The whole calibration sorts each worker's completions by the device
// and dtype of the validator that checked them (a CUDA worker against a CPU validator, and the
// reverse, where there is a GPU). Also the fp8 e4m3 rounding and the threshold rule on known
// values.
#include "validator/calibration.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>

#include "common/config.h"
#include "error_of.h"
#include "model/checkpoint.h"
#include "model/presets.h"
#include "validator/file_checks.h"
#include "validator/sample_checks.h"

namespace trellis::validator {
namespace {

namespace fs = std::filesystem;

class Calibration : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("trellis_calibration_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    model::init_model_dir(dir_, model::Arch::Qwen3, "tiny", 3);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static fs::path dir_;
  // A random model rarely samples its end token, and where it does its probability is ~1/vocab:
  // such an ending is honest but fails the termination rule, which is not calibrated here.
  Config config_ = Config::resolve({}, {"env.name=\"reverse_text\"", "rl.group_size=4",
                                        "rl.max_tokens=40", "validator.eos_min_prob=0"});
};
fs::path Calibration::dir_;

TEST_F(Calibration, HonestCompletionsPassAndFailAgainstOtherWeights) {
  auto model = model::load_transformer(dir_, {torch::kCPU, torch::kFloat32});
  const auto prompting = model::Prompting::load(dir_, model->config());
  const auto rules = Rules::from_config(config_, 0);
  const auto stops = stop_ids(prompting);
  const int64_t vocab = prompting.tok.vocab_size();

  HonestMaxima maxima;
  std::vector<HonestRun> runs;
  for (const auto layout : {KvLayout::kPaged, KvLayout::kTight}) {
    const WorkerSetting setting{4, 1, layout, torch::kFloat32};
    runs.push_back(generate_honest(*model, prompting, config_, setting, 8));
    const auto& run = runs.back();
    ASSERT_EQ(run.rows.size(), 8u) << setting.describe();
    EXPECT_GT(run.tokens, 0);
    for (const auto& row : run.rows) {
      ASSERT_FALSE(row.completion_tokens.empty());
      if (row.completion_tokens.size() > 1) EXPECT_FALSE(row.proof.empty());
    }
    if (layout == KvLayout::kTight) EXPECT_GT(run.preemptions, 0) << "the tight cache preempts";
    const auto check = check_rows(run.rows, rules, stops, vocab, *model, 4);
    EXPECT_EQ(check.completions, 8);
    EXPECT_EQ(check.passed, 8) << setting.describe() << ": " << check.first_reason;
    EXPECT_TRUE(check.failed.empty());
    maxima.add(check);
  }
  EXPECT_GE(maxima.worst.mant_err_mean, 0);
  EXPECT_GE(maxima.worst.mant_err_median, 0);
  EXPECT_GE(maxima.max_sampling_distance, 0);
  EXPECT_GE(maxima.max_logprob_error, 0);
  EXPECT_LE(maxima.worst.exp_mismatches, rules.thresholds.exp_mismatches);
  EXPECT_LE(maxima.worst.mant_err_mean, rules.thresholds.mant_err_mean);

  // Another model (another seed of `model init`): the worker's proofs are not its rows.
  const fs::path other_dir = dir_.string() + "_other";
  model::init_model_dir(other_dir, model::Arch::Qwen3, "tiny", 4);
  auto other = model::load_transformer(other_dir, {torch::kCPU, torch::kFloat32});
  fs::remove_all(other_dir);
  for (const auto& run : runs) {
    const auto check = check_rows(run.rows, rules, stops, vocab, *other, 4);
    EXPECT_EQ(check.passed, 0);
    EXPECT_EQ(check.failed.at("toploc"), check.completions) << check.first_reason;
    EXPECT_GT(check.least.exp_mismatches, rules.thresholds.exp_mismatches);
  }

  // 1% noise on the weights: each chunk may pass, but the file-wide mean of the chunks does not.
  add_relative_noise(*model, 0.01, 1);
  const auto noisy = check_rows(runs[0].rows, rules, stops, vocab, *model, 4);
  EXPECT_GT(noisy.min_group_mant_err_mean, rules.toploc_file_mant_err_mean)
      << "worst chunk " << noisy.worst.exp_mismatches << " / " << noisy.worst.mant_err_mean;
  EXPECT_LT(maxima.max_group_mant_err_mean, rules.toploc_file_mant_err_mean);
}

// An FP8 run (rl.precision = fp8): the validator recomputes with FP8 linear layers under the
// [validator.fp8] thresholds. Honest FP8 completions pass; a worker that claims the run's FP8 but
// rolls out with linear layers in its compute dtype is caught, and so is the reverse in a bf16
// run (an FP8 worker saving compute).
TEST_F(Calibration, AWorkerRollingOutInAnotherPrecisionThanTheRunsIsCaught) {
  auto model = model::load_transformer(dir_, {torch::kCPU, torch::kFloat32});
  const auto prompting = model::Prompting::load(dir_, model->config());
  const auto stops = stop_ids(prompting);
  const int64_t vocab = prompting.tok.vocab_size();
  Config fp8_run = config_;
  fp8_run.apply_override("rl.precision=\"fp8\"");
  const auto fp8_rules = Rules::from_config(fp8_run, 0);
  const auto bf16_rules = Rules::from_config(config_, 0);
  ASSERT_TRUE(fp8_rules.fp8);
  ASSERT_FALSE(bf16_rules.fp8);

  const auto fp8_rows = generate_honest(*model, prompting, fp8_run,
                                        {4, 1, KvLayout::kPaged, torch::kFloat32, true}, 8)
                            .rows;
  const auto plain_rows =
      generate_honest(*model, prompting, config_, {4, 1, KvLayout::kPaged, torch::kFloat32}, 8)
          .rows;
  ASSERT_EQ(fp8_rows.size(), 8u);
  ASSERT_EQ(plain_rows.size(), 8u);

  // Honest in their own run: every completion passes, and so does every file of 4 (min_samples).
  for (const auto& [rows, rules] : {std::pair{&fp8_rows, &fp8_rules}, {&plain_rows, &bf16_rules}}) {
    const auto check = check_rows(*rows, *rules, stops, vocab, *model, 4);
    EXPECT_EQ(check.passed, 8) << "fp8 " << rules->fp8 << ": " << check.first_reason;
    EXPECT_EQ(check.groups, 2);
    EXPECT_EQ(check.groups_rejected, 0) << "fp8 " << rules->fp8;
    if (rules->fp8) EXPECT_GT(check.min_group_fp8_ratio, 1);
  }
  // Rows without FP8 in the FP8 run: every file is rejected, by the precision check.
  const auto cheat = check_rows(plain_rows, fp8_rules, stops, vocab, *model, 4);
  EXPECT_EQ(cheat.groups_rejected, cheat.groups);
  EXPECT_LT(cheat.max_group_fp8_ratio, 1);
  std::vector<SampleStats> stats;
  std::vector<const rollout::RolloutRecord*> first_file;
  for (size_t i = 0; i < 4; ++i) first_file.push_back(&plain_rows[i]);
  for (auto& r : check_samples(first_file, {0, 1, 2, 3}, fp8_rules, stops, vocab,
                               [&](int64_t) -> model::Transformer& { return *model; }))
    stats.push_back(r.stats);
  const auto findings = check_file_average(stats, fp8_rules);
  ASSERT_FALSE(findings.empty());
  EXPECT_EQ(findings.back().check, "precision") << findings.back().text();
  // FP8 rows in a bf16 run (a worker saving compute): every file is rejected too.
  const auto saver = check_rows(fp8_rows, bf16_rules, stops, vocab, *model, 4);
  EXPECT_EQ(saver.groups_rejected, saver.groups) << "file mean " << saver.min_group_mant_err_mean;
}

// The whole calibration (`trellis bench validate`) over every compute it is given: each worker's
// completions are checked by a validator in each device and dtype, and sorted into the report's
// groups by what the validator shares with the worker.
std::vector<model::Compute> cpu_computes() {
  std::vector<model::Compute> computes = {{torch::kCPU, torch::kFloat32}};
  if (model::cpu_has_native_bf16()) computes.push_back({torch::kCPU, torch::kBFloat16});
  return computes;
}

CalibrationOptions small_calibration(const std::vector<model::Compute>& computes) {
  CalibrationOptions o;
  o.completions = 8;
  o.computes = computes;
  o.validator = computes.front();
  for (const auto& c : computes)
    o.settings.push_back({4, 1, KvLayout::kPaged, c.dtype, false, c.device});
  return o;
}

TEST_F(Calibration, ChecksEveryWorkerWithAValidatorInEveryDtype) {
  const auto computes = cpu_computes();
  const auto options = small_calibration(computes);
  const auto report = calibrate(dir_.string(), config_, options);
  const auto rules = Rules::from_config(config_, 0);

  ASSERT_EQ(report.honest.size(), computes.size());
  for (const auto& row : report.honest) {
    EXPECT_TRUE(row.same_compute()) << row.worker.describe();
    EXPECT_EQ(row.validator, "honest");
    EXPECT_EQ(row.check.passed, 8) << row.worker.describe() << ": " << row.check.first_reason;
    EXPECT_GT(row.generated_tokens, 0);
  }
  EXPECT_LE(report.maxima.worst.exp_mismatches, rules.thresholds.exp_mismatches);
  // Each worker against the validator in each other dtype, on the same device.
  ASSERT_EQ(report.cross.size(), computes.size() * (computes.size() - 1));
  for (const auto& row : report.cross) {
    EXPECT_TRUE(row.same_device());
    EXPECT_NE(row.worker.dtype, row.validator_compute.dtype);
    EXPECT_EQ(row.check.completions, 8);
  }
  EXPECT_TRUE(report.cross_device.empty());
  // The validator's own worker against dishonest weights: unrelated weights fail every completion.
  ASSERT_EQ(report.dishonest.size(), 5u);
  for (const auto& row : report.dishonest) {
    EXPECT_EQ(row.validator_compute.dtype, options.validator.dtype) << row.validator;
    if (row.validator != "fp8 rollout") EXPECT_EQ(row.worker.describe(), "b4 t1 paged fp32");
  }
  EXPECT_EQ(report.dishonest[3].validator, "other weights");
  EXPECT_EQ(report.dishonest[3].check.passed, 0);
  EXPECT_EQ(report.dishonest[4].validator, "fp8 rollout");
  EXPECT_TRUE(report.dishonest[4].worker.fp8);
  EXPECT_EQ(report.dishonest[4].check.groups_rejected, report.dishonest[4].check.groups);

  // A worker on a device or dtype that has no model is an error naming it.
  auto wrong = options;
  wrong.settings = {
      {4, 1, KvLayout::kPaged, torch::kFloat32, false, torch::Device(torch::kCUDA, 0)}};
  EXPECT_NE(test::error_of([&] {
              calibrate(dir_.string(), config_, wrong);
            }).find("cuda/fp32 is not among the devices and dtypes run"),
            std::string::npos);
}

// The target of a swarm of mixed machines: a CUDA worker's completions pass a CPU validator and a
// CPU worker's pass a CUDA validator, under the default thresholds, in fp32 and (where the CPU has
// it natively) bf16.
TEST_F(Calibration, ACudaWorkerPassesACpuValidatorAndTheReverse) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto computes = cpu_computes();
  for (const auto& c : cpu_computes())
    computes.push_back({torch::Device(torch::kCUDA, 0), c.dtype});
  const auto report = calibrate(dir_.string(), config_, small_calibration(computes));
  ASSERT_EQ(report.cross_device.size(), computes.size() * computes.size() / 2);
  int64_t cuda_workers = 0;
  for (const auto& row : report.cross_device) {
    EXPECT_FALSE(row.same_device());
    cuda_workers += row.worker.device.is_cuda();
    EXPECT_EQ(row.check.passed, row.check.completions)
        << row.worker.describe() << " checked on " << row.validator_compute.describe() << ": "
        << row.check.first_reason;
    EXPECT_EQ(row.check.groups_rejected, 0) << row.worker.describe();
  }
  EXPECT_EQ(cuda_workers, static_cast<int64_t>(report.cross_device.size() / 2));
}

// The dishonest weights of `bench validate --device cuda`: the same noise as on the CPU (found on
// an H200, where the noise drawn on the CPU was added to CUDA weights and the run stopped).
TEST_F(Calibration, NoisyWeightsAreTheSameOnEveryDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto cpu = model::load_transformer(dir_, {torch::kCPU, torch::kFloat32});
  auto gpu = model::load_transformer(dir_, {torch::Device(torch::kCUDA, 0), torch::kFloat32});
  add_relative_noise(*cpu, 0.01, 3);
  add_relative_noise(*gpu, 0.01, 3);
  // Each tensor's scale (its RMS) is summed on its device, so the two may round apart.
  const auto& on_cpu = cpu->named_parameters();
  const auto& on_gpu = gpu->named_parameters();
  ASSERT_EQ(on_cpu.size(), on_gpu.size());
  for (size_t i = 0; i < on_cpu.size(); ++i)
    EXPECT_TRUE(torch::allclose(on_gpu[i].second.cpu(), on_cpu[i].second, 1e-6, 0))
        << on_cpu[i].first;
}

TEST(Fp8E4m3, RoundsToThreeMantissaBitsWithinRange) {
  const auto x = torch::tensor({0.0, 1.0, 1.0625, 1.1875, 0.3, -0.3, 448.0, 470.0, 1e6, -1e6,
                                0.015625, 0.001953125, 0.0009, 0.003},
                               torch::kFloat64);
  const auto y = fp8_e4m3_round(x);
  const std::vector<double> want = {0.0,      1.0,         1.0,   1.25,      0.3125,
                                    -0.3125,  448.0,       448.0, 448.0,     -448.0,
                                    0.015625, 0.001953125, 0.0,   0.00390625};
  ASSERT_EQ(y.scalar_type(), torch::kFloat64);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_DOUBLE_EQ(y[static_cast<int64_t>(i)].item<double>(), want[i]) << "x[" << i << "]";
}

TEST(SuggestThresholds, TwiceTheHonestMaximaAndNeverBelowTheFloor) {
  HonestMaxima honest;
  honest.worst = {5, 1.3, 2};
  honest.max_sampling_distance = 0.0031;
  honest.max_logprob_error = 0.012;
  SuggestedThresholds floor;
  floor.toploc = toploc::Thresholds::strict();
  auto t = suggest_thresholds(honest, floor);
  EXPECT_EQ(t.toploc.exp_mismatches, 38u);  // 2 * 5 + 2 = 12 < 38
  EXPECT_EQ(t.toploc.mant_err_mean, 10);
  EXPECT_EQ(t.toploc.mant_err_median, 8);
  EXPECT_DOUBLE_EQ(t.sampling_tolerance, 0.01);  // 2 * 0.0031 = 0.0062 -> 0.01
  EXPECT_EQ(t.max_sampling_misses, 0);
  EXPECT_DOUBLE_EQ(t.max_logprob_error, 0.05);  // 0.024 -> 0.05

  honest.worst = {20, 6.2, 4};
  honest.max_sampling_distance = 0;
  t = suggest_thresholds(honest, floor);
  EXPECT_EQ(t.toploc.exp_mismatches, 42u);
  EXPECT_EQ(t.toploc.mant_err_mean, 14);
  EXPECT_EQ(t.toploc.mant_err_median, 9);
  EXPECT_DOUBLE_EQ(t.sampling_tolerance, 0.001);  // the smallest step
}

}  // namespace
}  // namespace trellis::validator
