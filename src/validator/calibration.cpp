#include "validator/calibration.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "common/clock.h"
#include "common/error.h"
#include "env/registry.h"
#include "model/checkpoint.h"
#include "pipeline/fixed_data_sampler.h"
#include "pipeline/partial_rollouts.h"
#include "pipeline/rollout_rows.h"
#include "rl/rl_loop.h"
#include "rl/rollouts.h"
#include "rl/task_source.h"
#include "toploc/proof_builder.h"
#include "validator/file_checks.h"
#include "validator/sample_checks.h"

namespace trellis::validator {
namespace {

constexpr int64_t kPackedTokens = 4096;  // tokens per packed forward (the trainer's default)

const char* dtype_name(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 ? "bf16" : dtype == torch::kFloat32 ? "fp32" : "?";
}

// Restores torch's thread count when the calibration ends (or throws).
class ThreadsGuard {
 public:
  ThreadsGuard() : threads_(torch::get_num_threads()) {}
  ~ThreadsGuard() { torch::set_num_threads(threads_); }

 private:
  int threads_;
};

// The smallest of 0.001, 0.002, 0.005, 0.01, ... that is >= x.
double round_up_125(double x) {
  if (!(x > 0.001)) return 0.001;
  if (!std::isfinite(x)) return x;
  const double decade = std::pow(10.0, std::floor(std::log10(x)));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * decade >= x * (1 - 1e-12)) return m * decade;
  return 10 * decade;
}

}  // namespace

const char* kv_layout_name(KvLayout layout) {
  switch (layout) {
    case KvLayout::kPaged:
      return "paged";
    case KvLayout::kTight:
      return "tight";
    case KvLayout::kChunked:
      return "chunked";
  }
  return "?";
}

std::string WorkerSetting::describe() const {
  return fmt::format("b{} t{} {} {}{}{}", batch, threads, kv_layout_name(layout), dtype_name(dtype),
                     fp8 ? " fp8" : "", device.is_cpu() ? "" : " " + device.str());
}

HonestRun generate_honest(model::Transformer& model, const model::Prompting& prompting,
                          const Config& config, const WorkerSetting& setting, int64_t completions) {
  if (model.compute().dtype != setting.dtype || model.compute().device != setting.device)
    throw Error(fmt::format("calibration: the model computes on {}, the setting asks for {}",
                            model.compute().describe(), setting.compute().describe()));
  const auto rl = rl::RlLoopConfig::from_config(config);
  const auto environment = env::make_environment(config);
  const rl::TaskSource tasks(*environment, config, rl.seed);
  const pipeline::FixedDataSampler sampler(tasks, "calibration", config);
  auto ro = rl::rollout_options(rl, config);
  // A group shares one prefill and is admitted whole, so it cannot be larger than the batch.
  ro.group_size = std::max<int64_t>(1, std::min(ro.group_size, setting.batch));
  const int64_t wanted = std::max(completions, setting.batch);
  const int64_t groups = (wanted + ro.group_size - 1) / ro.group_size;
  const auto drawn = sampler.draw(0, 0, groups);
  ro.seed = sampler.seed(0, 0);

  auto eo = pipeline::worker_engine_options(config, /*partial=*/false, prompting.tok.vocab_size());
  eo.max_num_seqs = setting.batch;
  eo.fp8 = setting.fp8;
  if (setting.layout != KvLayout::kPaged) {
    // The longest prompt, and 32 tokens for a length sentence (length_reward.h).
    int64_t prompt = 0;
    for (const auto& task : drawn) {
      const auto messages = environment->build_prompt(task, {.system_prompt = ro.system_prompt});
      prompt = std::max<int64_t>(
          prompt, static_cast<int64_t>(rl::encode_prompt(prompting, messages).size()) + 32);
    }
    if (setting.layout == KvLayout::kTight) {
      // Room for one whole completion and a block: the others are preempted as the cache fills
      // and resume by re-prefilling prompt + prefix.
      eo.kv_cache_tokens = prompt + ro.max_tokens + 1 + 16;
    } else {
      // A forward holds any one prompt whole, so it always samples a token, but not a prompt
      // beside the decodes of another group: that prompt is prefilled in chunks across forwards.
      eo.max_batch_tokens = prompt + 1;
    }
  }

  torch::set_num_threads(setting.threads);
  toploc::ProofBuilder proofs;  // outlives the engine that feeds it
  engine::Engine engine(model, eo);
  ro.proofs = &proofs;
  rl::feed_proofs(engine, proofs);

  HonestRun run;
  run.setting = setting;
  const auto before = engine.stats();
  const double t0 = monotonic_seconds();
  const auto result = rl::generate_rollouts(engine, prompting, *environment, drawn, ro);
  run.seconds = monotonic_seconds() - t0;
  const auto after = engine.stats();
  run.tokens = after.tokens_generated - before.tokens_generated;
  run.preemptions = after.preemptions - before.preemptions;
  run.forwards = after.steps - before.steps;
  run.proof_seconds = proofs.proving_seconds() + proofs.adding_seconds();
  run.rows = pipeline::to_records({"calibration", "calibration", 0, 0}, result, drawn);
  return run;
}

size_t checked_per_file(const Rules& rules, int64_t file_rows) {
  const auto rows = static_cast<size_t>(std::max<int64_t>(1, file_rows));
  const auto want = std::max<size_t>(
      static_cast<size_t>(std::max<int64_t>(0, rules.min_samples)),
      static_cast<size_t>(std::ceil(rules.sample_fraction * static_cast<double>(rows))));
  return std::max<size_t>(1, std::min(rows, want));
}

CheckSummary check_rows(const std::vector<rollout::RolloutRecord>& rows, const Rules& rules,
                        const std::vector<int32_t>& stops, int64_t vocab, model::Transformer& model,
                        size_t per_forward) {
  const ModelOf model_of = [&](int64_t) -> model::Transformer& { return model; };
  CheckSummary s;
  std::vector<SampleStats> stats;
  const double t0 = monotonic_seconds();
  std::vector<SampleResult> results;
  for (size_t start = 0; start < rows.size(); start += std::max<size_t>(1, per_forward)) {
    std::vector<const rollout::RolloutRecord*> batch;
    std::vector<size_t> batch_indices;
    for (size_t i = start; i < std::min(rows.size(), start + std::max<size_t>(1, per_forward));
         ++i) {
      if (rows[i].completion_tokens.empty()) continue;
      batch.push_back(&rows[i]);
      batch_indices.push_back(i);
    }
    if (batch.empty()) continue;
    for (auto& r : check_samples(batch, batch_indices, rules, stops, vocab, model_of))
      results.push_back(std::move(r));
  }
  s.seconds = monotonic_seconds() - t0;
  for (const auto& r : results) {
    const auto w = worst_chunk(r.stats.toploc);
    const auto& st = r.stats;
    if (s.completions == 0) {
      s.least = w;
      s.min_sampling_misses = st.sampling_misses;
      s.min_logprob_error = st.logprob_error;
    }
    ++s.completions;
    s.tokens += st.tokens;
    s.worst.exp_mismatches = std::max(s.worst.exp_mismatches, w.exp_mismatches);
    s.worst.mant_err_mean = std::max(s.worst.mant_err_mean, w.mant_err_mean);
    s.worst.mant_err_median = std::max(s.worst.mant_err_median, w.mant_err_median);
    s.least.exp_mismatches = std::min(s.least.exp_mismatches, w.exp_mismatches);
    s.least.mant_err_mean = std::min(s.least.mant_err_mean, w.mant_err_mean);
    s.least.mant_err_median = std::min(s.least.mant_err_median, w.mant_err_median);
    s.max_sampling_distance = std::max(s.max_sampling_distance, st.max_sampling_distance);
    s.max_sampling_misses = std::max(s.max_sampling_misses, st.sampling_misses);
    s.min_sampling_misses = std::min(s.min_sampling_misses, st.sampling_misses);
    s.max_logprob_error = std::max(s.max_logprob_error, st.logprob_error);
    s.min_logprob_error = std::min(s.min_logprob_error, st.logprob_error);
    if (st.stop_prob >= 0)
      s.min_stop_prob =
          s.min_stop_prob < 0 ? st.stop_prob : std::min(s.min_stop_prob, st.stop_prob);
    stats.push_back(st);
    if (r.findings.empty()) {
      ++s.passed;
      continue;
    }
    std::vector<std::string> seen;
    for (const auto& f : r.findings) {
      if (std::find(seen.begin(), seen.end(), f.check) == seen.end()) {
        seen.push_back(f.check);
        ++s.failed[f.check];
      }
    }
    if (s.first_reason.empty()) s.first_reason = r.findings.front().text();
  }
  s.file_mant_err_mean = average_chunks(stats).mant_err_mean;
  const auto group = static_cast<size_t>(std::max<int64_t>(1, rules.min_samples));
  for (size_t i = 0; i + group <= stats.size(); i += group) {
    const std::vector<SampleStats> part(stats.begin() + static_cast<std::ptrdiff_t>(i),
                                        stats.begin() + static_cast<std::ptrdiff_t>(i + group));
    const double a = average_chunks(part).mant_err_mean;
    s.min_group_mant_err_mean = i == 0 ? a : std::min(s.min_group_mant_err_mean, a);
    s.max_group_mant_err_mean = std::max(s.max_group_mant_err_mean, a);
    ++s.groups;
    if (!check_file_average(part, rules).empty()) ++s.groups_rejected;
    if (rules.fp8) {
      const double without = average_chunks(part, &SampleStats::toploc_without_fp8).mant_err_mean;
      const double ratio = a > 0 ? without / a : without > 0 ? INFINITY : 1.0;
      s.min_group_fp8_ratio = i == 0 ? ratio : std::min(s.min_group_fp8_ratio, ratio);
      s.max_group_fp8_ratio = std::max(s.max_group_fp8_ratio, ratio);
    }
  }
  // The prefills alone (what check_sample computes first), to tell the model's share of the time
  // from the checks'.
  torch::NoGradGuard no_grad;
  const double t1 = monotonic_seconds();
  for (const auto& row : rows) {
    const auto n = static_cast<int64_t>(row.completion_tokens.size());
    if (n == 0) continue;
    const auto p = static_cast<int64_t>(row.prompt_tokens.size());
    std::vector<int64_t> seq(row.prompt_tokens.begin(), row.prompt_tokens.end());
    seq.insert(seq.end(), row.completion_tokens.begin(), row.completion_tokens.end() - 1);
    model.forward(torch::tensor(seq),
                  {.logits = true, .hidden = true, .rows = torch::arange(p - 1, p + n - 1)});
  }
  model::synchronize(model.compute());
  s.prefill_seconds = monotonic_seconds() - t1;

  const double t2 = monotonic_seconds();
  std::vector<int64_t> tokens, positions, lens, out_rows;
  const auto flush = [&] {
    if (lens.empty()) return;
    model.forward_packed(torch::tensor(tokens), torch::tensor(positions), lens,
                         {.logits = true, .hidden = true, .rows = torch::tensor(out_rows)});
    tokens.clear();
    positions.clear();
    lens.clear();
    out_rows.clear();
  };
  for (const auto& row : rows) {
    const auto n = static_cast<int64_t>(row.completion_tokens.size());
    if (n == 0) continue;
    const auto p = static_cast<int64_t>(row.prompt_tokens.size());
    if (!lens.empty() && static_cast<int64_t>(tokens.size()) + p + n - 1 > kPackedTokens) flush();
    const auto offset = static_cast<int64_t>(tokens.size());
    tokens.insert(tokens.end(), row.prompt_tokens.begin(), row.prompt_tokens.end());
    tokens.insert(tokens.end(), row.completion_tokens.begin(), row.completion_tokens.end() - 1);
    for (int64_t i = 0; i < p + n - 1; ++i) positions.push_back(i);
    for (int64_t i = 0; i < n; ++i) out_rows.push_back(offset + p - 1 + i);
    lens.push_back(p + n - 1);
  }
  flush();
  model::synchronize(model.compute());
  s.packed_seconds = monotonic_seconds() - t2;
  return s;
}

void HonestMaxima::add(const CheckSummary& s) {
  worst.exp_mismatches = std::max(worst.exp_mismatches, s.worst.exp_mismatches);
  worst.mant_err_mean = std::max(worst.mant_err_mean, s.worst.mant_err_mean);
  worst.mant_err_median = std::max(worst.mant_err_median, s.worst.mant_err_median);
  max_sampling_distance = std::max(max_sampling_distance, s.max_sampling_distance);
  max_sampling_misses = std::max(max_sampling_misses, s.max_sampling_misses);
  max_logprob_error = std::max(max_logprob_error, s.max_logprob_error);
  max_group_mant_err_mean = std::max(max_group_mant_err_mean, s.max_group_mant_err_mean);
  if (s.max_group_fp8_ratio >= 0)
    min_group_fp8_ratio = min_group_fp8_ratio < 0
                              ? s.min_group_fp8_ratio
                              : std::min(min_group_fp8_ratio, s.min_group_fp8_ratio);
  if (s.min_stop_prob >= 0)
    min_stop_prob = min_stop_prob < 0 ? s.min_stop_prob : std::min(min_stop_prob, s.min_stop_prob);
}

SuggestedThresholds suggest_thresholds(const HonestMaxima& honest,
                                       const SuggestedThresholds& floor) {
  SuggestedThresholds t;
  const auto& w = honest.worst;
  t.toploc.exp_mismatches = std::max(floor.toploc.exp_mismatches, 2 * w.exp_mismatches + 2);
  t.toploc.mant_err_mean = std::max(floor.toploc.mant_err_mean, std::ceil(2 * w.mant_err_mean + 1));
  t.toploc.mant_err_median =
      std::max(floor.toploc.mant_err_median, std::ceil(2 * w.mant_err_median + 1));
  t.sampling_tolerance =
      std::max(floor.sampling_tolerance, round_up_125(2 * honest.max_sampling_distance));
  // Every honest token lies within the tolerance (>= its largest distance): no misses needed.
  t.max_sampling_misses = floor.max_sampling_misses;
  t.max_logprob_error =
      std::max(floor.max_logprob_error, round_up_125(2 * honest.max_logprob_error));
  return t;
}

SuggestedThresholds unmeasured_floor() {
  SuggestedThresholds f;
  f.toploc = toploc::Thresholds::strict();
  f.sampling_tolerance = 0.1;
  f.max_sampling_misses = 0;
  f.max_logprob_error = 0.05;
  return f;
}

std::vector<WorkerSetting> calibration_matrix(const std::vector<model::Compute>& computes,
                                              bool fp8) {
  std::vector<WorkerSetting> m;
  for (const auto& c : computes) {
    const int threads = c.device.is_cpu() ? 2 : 1;  // of every setting but the first ones
    m.push_back({1, 1, KvLayout::kPaged, c.dtype, fp8, c.device});
    m.push_back({8, 1, KvLayout::kPaged, c.dtype, fp8, c.device});
    if (threads != 1) m.push_back({8, threads, KvLayout::kPaged, c.dtype, fp8, c.device});
    m.push_back({64, threads, KvLayout::kPaged, c.dtype, fp8, c.device});
    m.push_back({8, threads, KvLayout::kTight, c.dtype, fp8, c.device});
    m.push_back({16, threads, KvLayout::kChunked, c.dtype, fp8, c.device});
  }
  return m;
}

void add_relative_noise(model::Transformer& model, double relative, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (const auto& [name, p] : model.named_parameters()) {
    const double rms = p.to(torch::kFloat64).pow(2).mean().sqrt().item<double>();
    if (rms == 0) continue;
    // Drawn on the CPU, so the noise is the same whatever device holds the model.
    p.add_(at::normal(0.0, relative * rms, p.sizes(), gen).to(p.device(), p.scalar_type()));
  }
}

torch::Tensor fp8_e4m3_round(const torch::Tensor& x) {
  const auto f = x.to(torch::kFloat32);
  // The exponent of each value, clamped to e4m3's normal range: below 2^-6 the subnormals keep
  // the step of 2^-9.
  const auto exponent = torch::floor(torch::log2(f.abs())).clamp(-6, 8);
  const auto step = torch::exp2(exponent - 3);
  return (torch::round(f / step) * step).clamp(-448, 448).to(x.scalar_type());
}

void quantize_fp8_e4m3(model::Transformer& model) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_parameters()) {
    const double amax = p.abs().max().item<double>();
    if (amax == 0) continue;
    const double scale = 448.0 / amax;
    p.copy_(fp8_e4m3_round(p * scale) / scale);
  }
}

CalibrationReport calibrate(const std::string& model_dir, const Config& config,
                            const CalibrationOptions& options,
                            const std::function<void(const std::string&)>& on_progress) {
  const auto progress = [&](const std::string& what) {
    if (on_progress) on_progress(what);
  };
  if (options.computes.empty()) throw Error("calibration: no device and dtype to run");
  ThreadsGuard threads_guard;
  // One model per device and dtype: the workers' of that compute, and a validator's.
  std::vector<std::unique_ptr<model::Transformer>> models;
  for (const auto& c : options.computes) models.push_back(model::load_transformer(model_dir, c));
  const auto model_in = [&](const model::Compute& c) -> model::Transformer& {
    for (const auto& m : models) {
      if (m->compute() == c) return *m;
    }
    throw Error(
        fmt::format("calibration: {} is not among the devices and dtypes run", c.describe()));
  };
  model_in(options.validator);
  const auto prompting = model::Prompting::load(model_dir, models.front()->config());
  const Rules rules = Rules::from_config(config, 0);
  const auto stops = stop_ids(prompting);
  const int64_t vocab = prompting.tok.vocab_size();
  // Completions are checked in the packed batches a validator checks one file's subset in.
  const size_t per_forward =
      checked_per_file(rules, config.get_at_least<int64_t>("infer.groups_per_submission", 1) *
                                  rules.rollout.group_size);

  // Warm-up, untimed: the first forwards of a model pay for kernel selection and page faults.
  for (const auto& m : models) {
    const auto c = m->compute();
    progress("warm-up " + c.describe());
    const auto run = generate_honest(*m, prompting, config,
                                     {8, 2, KvLayout::kPaged, c.dtype, rules.fp8, c.device}, 8);
    check_rows(run.rows, rules, stops, vocab, *m, per_forward);
  }

  // One row of the report: `run`'s completions checked by `model`, on the worker's threads (the
  // same machine and threads as the worker).
  const auto checked = [&](const HonestRun& run, std::string validator, model::Transformer& model) {
    torch::set_num_threads(run.setting.threads);
    CalibrationRow row;
    row.worker = run.setting;
    row.validator_compute = model.compute();
    row.validator = std::move(validator);
    row.generated_tokens = run.tokens;
    row.generation_seconds = run.seconds;
    row.preemptions = run.preemptions;
    row.proof_seconds = run.proof_seconds;
    row.check = check_rows(run.rows, rules, stops, vocab, model, per_forward);
    return row;
  };

  CalibrationReport report;
  report.checked_per_file = static_cast<int64_t>(per_forward);
  std::vector<HonestRun> runs;
  runs.reserve(options.settings.size());
  for (const auto& setting : options.settings) {
    if (setting.fp8 != rules.fp8)
      throw Error(
          fmt::format("calibration: setting {} is not honest in a run with rl.precision "
                      "= \"{}\"",
                      setting.describe(), config.get<std::string>("rl.precision")));
    auto& worker = model_in(setting.compute());
    progress("generate " + setting.describe());
    runs.push_back(generate_honest(worker, prompting, config, setting, options.completions));
    for (const auto& m : models) {
      progress(fmt::format("check {} with {}", setting.describe(), m->compute().describe()));
      CalibrationRow row = checked(runs.back(), "honest", *m);
      if (row.same_compute()) {
        report.maxima.add(row.check);
        report.honest.push_back(std::move(row));
      } else if (row.same_device()) {
        report.cross_maxima.add(row.check);
        report.cross.push_back(std::move(row));
      } else {
        report.cross_device_maxima.add(row.check);
        report.cross_device.push_back(std::move(row));
      }
    }
  }
  // The completions checked against dishonest weights: of the b8 paged setting with the most
  // threads in the validator's compute, else of the first in that compute, else of the first.
  const auto in_validator = [&](const HonestRun& run) {
    return run.setting.compute() == options.validator;
  };
  const HonestRun* dishonest_rows = nullptr;
  for (const auto& run : runs) {
    if (in_validator(run) && run.setting.batch == 8 && run.setting.layout == KvLayout::kPaged &&
        (!dishonest_rows || run.setting.threads > dishonest_rows->setting.threads))
      dishonest_rows = &run;
  }
  for (const auto& run : runs) {
    if (!dishonest_rows && in_validator(run)) dishonest_rows = &run;
  }
  if (!dishonest_rows && !runs.empty()) dishonest_rows = &runs.front();
  if (!dishonest_rows) return report;

  // Dishonest weights in the validator's compute: the worker claims the policy but generated with
  // these, which is the same as checking its honest completions against them.
  struct Weights {
    std::string name;
    std::function<void(model::Transformer&)> change;
  };
  const std::vector<Weights> dishonest = {
      {fmt::format("noise {:g}%", 100 * options.noise),
       [&](model::Transformer& m) { add_relative_noise(m, options.noise, options.seed); }},
      {fmt::format("noise {:g}%", 30 * options.noise),
       [&](model::Transformer& m) { add_relative_noise(m, options.noise * 0.3, options.seed); }},
      {"fp8-e4m3", [](model::Transformer& m) { quantize_fp8_e4m3(m); }},
      {"other weights", [&](model::Transformer& m) { m.init_random(options.seed + 0x5eed); }},
  };
  for (const auto& d : dishonest) {
    progress("check " + dishonest_rows->setting.describe() + " with " + d.name);
    auto m = model::load_transformer(model_dir, options.validator);
    d.change(*m);
    report.dishonest.push_back(checked(*dishonest_rows, d.name, *m));
  }

  // A worker that claims the run's precision but rolls out in the other one (a bf16 worker in an
  // FP8 run saves nothing but skips the run's numerics; an FP8 worker in a bf16 run saves compute):
  // its completions against the honest validator, which recomputes in the run's precision.
  WorkerSetting other = dishonest_rows->setting;
  other.fp8 = !rules.fp8;
  progress("generate " + other.describe());
  const HonestRun cheat =
      generate_honest(model_in(other.compute()), prompting, config, other, options.completions);
  progress(fmt::format("check {} with {}", other.describe(), options.validator.describe()));
  report.dishonest.push_back(
      checked(cheat, rules.fp8 ? "bf16 rollout" : "fp8 rollout", model_in(options.validator)));
  return report;
}

}  // namespace trellis::validator
