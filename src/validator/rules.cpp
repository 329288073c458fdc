#include "validator/rules.h"

#include "common/error.h"
#include "rl/precision.h"
#include "rl/rl_loop.h"

namespace trellis::validator {
namespace {

// The numerical thresholds of one table ("validator." or "validator.fp8.") into `r`.
void read_thresholds(const Config& config, const std::string& t, Rules& r) {
  r.thresholds.exp_mismatches =
      static_cast<uint32_t>(config.get_at_least<int64_t>(t + "toploc_exp_mismatches", 0));
  r.thresholds.mant_err_mean = config.get_at_least<double>(t + "toploc_mant_err_mean", 0);
  r.thresholds.mant_err_median = config.get_at_least<double>(t + "toploc_mant_err_median", 0);
  r.toploc_file_mant_err_mean = config.get_at_least<double>(t + "toploc_file_mant_err_mean", 0);
  r.sampling_tolerance = config.get_at_least<double>(t + "sampling_tolerance", 0);
  r.max_sampling_misses = config.get_at_least<int64_t>(t + "max_sampling_misses", 0);
  r.max_logprob_error = config.get_at_least<double>(t + "max_logprob_error", 0);
}

}  // namespace

Rules Rules::from_config(const Config& config, int64_t dataset_size) {
  const auto rl = rl::RlLoopConfig::from_config(config);
  Rules r;
  r.rollout = rl::rollout_options(rl, config);
  r.normalize_std = rl.normalize_std;
  r.async_level = rl.async_level;
  r.fp8 = rl::Precision::from_config(config).rollout_fp8;
  r.dataset_size =
      dataset_size > 0 ? dataset_size : config.get_at_least<int64_t>("infer.dataset_size", 1);
  r.partial_rollouts = config.get<bool>("infer.partial_rollouts");
  r.proofs = config.get<bool>("toploc.proofs");
  // The numerical thresholds: FP8 rollouts differ more between honest machines (a last-bit
  // difference before a linear layer can move a value to the next FP8 code), so they have their
  // own, calibrated apart (docs/validation.md#fp8). Both tables are read, so that a bad value in
  // either is named whatever the run's precision; the run's own last.
  read_thresholds(config, r.fp8 ? "validator." : "validator.fp8.", r);
  read_thresholds(config, r.fp8 ? "validator.fp8." : "validator.", r);  // the run's, kept
  r.fp8_precision_ratio = config.get_at_least<double>("validator.fp8.precision_ratio", 0);
  if (r.fp8_precision_ratio > 1)
    fail("validator.fp8.precision_ratio",
         "must be at most 1 (an honest FP8 file lies closer to "
         "the FP8 recomputation), got {}",
         r.fp8_precision_ratio);
  r.eos_min_prob = config.get_at_least<double>("validator.eos_min_prob", 0);
  if (r.eos_min_prob >= 1)
    fail("validator.eos_min_prob", "must be below 1, got {}", r.eos_min_prob);
  r.sample_fraction = config.get_at_least<double>("validator.sample_fraction", 0);
  if (r.sample_fraction > 1)
    fail("validator.sample_fraction", "is a fraction of a file's rows, at most 1, got {}",
         r.sample_fraction);
  r.min_samples = config.get_at_least<int64_t>("validator.min_samples", 0);
  r.max_file_seconds = config.get_at_least<double>("validator.max_file_seconds", 0);
  r.max_file_rows = config.get_at_least<int64_t>("validator.max_file_rows", 1);
  r.max_reward_checks = config.get_at_least<int64_t>("validator.max_reward_checks", 1);
  return r;
}

}  // namespace trellis::validator
