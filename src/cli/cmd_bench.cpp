// `trellis bench train | generate | rollouts | verify | validate`: training throughput and MFU,
// rollout engine speed, the rollout phase of plain vs C3PO++ workers, verifier throughput, and the
// validator's calibration and speed against generation on this machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <sys/resource.h>

#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/env_flags.h"
#include "common/error.h"
#include "common/logging.h"
#include "engine/generate_bench.h"
#include "env/registry.h"
#include "env/verify_bench.h"
#include "model/checkpoint.h"
#include "pipeline/rollout_bench.h"
#include "rl/train_bench.h"
#include "validator/calibration.h"

namespace trellis::cli {
namespace {

// The compute dtype, and "+fp8" when the linear layers run in FP8.
std::string dtype_label(const model::Compute& compute, bool fp8) {
  return std::string(compute.bf16() ? "bf16" : "fp32") + (fp8 ? "+fp8" : "");
}

struct BenchTrainFlags {
  std::string model;
  rl::TrainBenchOptions options;
  ComputeFlags compute;
};

void run_bench_train(const BenchTrainFlags& f) {
  auto compute = setup_compute(f.compute);
  auto transformer = model::load_transformer(f.model, compute);
  const auto& c = transformer->config();
  const auto& o = f.options;
  std::printf(
      "bench train: %s (%s, %.1fM params), %s, %d threads; RL steps of %lld rollouts, prompt %lld "
      "+ completion %lld-%lld tokens, %lld optimizer step(s) each\n",
      f.model.c_str(), model::arch_name(c.arch), c.num_parameters() / 1e6,
      compute.describe().c_str(), torch::get_num_threads(), static_cast<long long>(o.batch),
      static_cast<long long>(o.prompt_len), static_cast<long long>(o.completion_len / 2),
      static_cast<long long>(o.completion_len), static_cast<long long>(o.optimizer_steps));
  auto r = rl::bench_train(*transformer, o, [&](int64_t step, double loss) {
    std::fprintf(stderr, "\r  step %lld/%lld  loss %+.4f", static_cast<long long>(step),
                 static_cast<long long>(o.steps), loss);
    std::fflush(stderr);
  });
  std::fprintf(stderr, "\n");
  std::printf("%-8s %6s %12s %14s %14s %7s\n", "dtype", "steps", "tokens/s", "model TFLOP/s",
              "matmul TFLOP/s", "MFU");
  std::printf("%-8s %6lld %12.1f %14.3f %14.3f %6.1f%%\n", dtype_label(compute, o.fp8).c_str(),
              static_cast<long long>(r.steps), r.tokens_per_s, r.mfu * r.matmul_flops / 1e12,
              r.matmul_flops / 1e12, 100.0 * r.mfu);
  std::printf("per step: %.2f s (logp_old %.2f s, loss + backward + AdamW %.2f s), %lld tokens\n",
              r.seconds / r.steps, r.logp_old_seconds / r.steps,
              (r.seconds - r.logp_old_seconds) / r.steps,
              static_cast<long long>(r.tokens / r.steps));
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("peak memory: %.0f MiB (process RSS)%s\n", usage.ru_maxrss / 1024.0,
              o.activation_checkpointing ? ", layers recomputed in the backward pass" : "");
}

struct BenchGenerateFlags {
  std::string model;
  engine::GenerateBenchOptions options;
  ComputeFlags compute;
};

void run_bench_generate(const BenchGenerateFlags& f) {
  auto compute = setup_compute(f.compute);
  auto transformer = model::load_transformer(f.model, compute);
  const auto& c = transformer->config();
  const auto& o = f.options;
  std::printf(
      "bench generate: %s (%s, %.1fM params), %s, %d threads, batch %lld, prompt %lld tokens, "
      "%lld new tokens each\n",
      f.model.c_str(), model::arch_name(c.arch), c.num_parameters() / 1e6,
      compute.describe().c_str(), torch::get_num_threads(), static_cast<long long>(o.batch),
      static_cast<long long>(o.prompt_len), static_cast<long long>(o.max_tokens));
  auto r = engine::bench_generate(*transformer, o, [](int64_t done, int64_t total) {
    std::fprintf(stderr, "\r  %lld/%lld tokens", static_cast<long long>(done),
                 static_cast<long long>(total));
    std::fflush(stderr);
  });
  std::fprintf(stderr, "\n");
  std::printf("%-8s %8s %10s %12s %15s %14s %14s %6s\n", "dtype", "batch", "tokens/s",
              "decode tok/s", "decode step ms", "model TFLOP/s", "matmul TFLOP/s", "util");
  std::printf("%-6s %8lld %10.1f %12.1f %15.2f %14.3f %14.3f %5.1f%%\n",
              dtype_label(compute, o.fp8).c_str(), static_cast<long long>(o.batch), r.tokens_per_s,
              r.decode_tokens_per_s, r.decode_step_ms, r.achieved_flops / 1e12,
              r.matmul_flops / 1e12, 100.0 * r.utilization);
  if (r.decode_graphs > 0) {
    std::printf(
        "decode steps replayed %lld recorded CUDA graphs (one per batch size; --eager: "
        "none)\n",
        static_cast<long long>(r.decode_graphs));
  }
  if (r.memory_bandwidth > 0) {
    std::printf("decode reads %.1f GB/s (weights + KV cache) = %.1f%% of the %.1f GB/s read rate\n",
                r.decode_bandwidth / 1e9, 100.0 * r.bandwidth_fraction, r.memory_bandwidth / 1e9);
  }
  std::printf(
      "%lld tokens in %.2f s: prefill %.2f s (%lld prompt tokens), %lld decode steps %.2f s\n",
      static_cast<long long>(r.generated), r.seconds, r.prefill_s,
      static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.decode_steps), r.decode_s);
}

struct BenchRolloutsFlags {
  std::string model;
  EnvFlags env;
  pipeline::RolloutBenchOptions options;
  ComputeFlags compute;
  bool proofs = false;  // each mode also with TOPLOC proofs
};

void run_bench_rollouts(const BenchRolloutsFlags& f) {
  const Config config = f.env.config();
  auto compute = setup_compute(f.compute);
  auto transformer = model::load_transformer(f.model, compute);
  auto o = f.options;
  if (o.groups_per_step == 0) {
    o.groups_per_step = std::max<int64_t>(
        1, config.get<int64_t>("rl.batch_size") / config.get<int64_t>("rl.group_size"));
  }
  std::printf(
      "bench rollouts: %s, %s, %d threads; %lld steps of %lld groups of %lld, max_tokens %lld\n",
      f.model.c_str(), compute.describe().c_str(), torch::get_num_threads(),
      static_cast<long long>(o.steps), static_cast<long long>(o.groups_per_step),
      static_cast<long long>(config.get<int64_t>("rl.group_size")),
      static_cast<long long>(config.get<int64_t>("rl.max_tokens")));
  std::printf("%-12s %9s %9s %12s %13s %14s %10s %11s %8s\n", "mode", "s/step", "tokens/s",
              "decode batch", "forwards/step", "prefilled/step", "tokens/step", "mean length",
              "dropped");
  std::vector<std::string> overheads;
  if (f.proofs) {
    // The first mode measured would otherwise also pay for warming up (kernel selection,
    // allocator, page faults), which is larger than the effect measured here.
    std::fprintf(stderr, "  warm-up step...");
    auto warm = o;
    warm.steps = 1;
    pipeline::bench_rollouts(*transformer, f.model, config, warm);
    std::fprintf(stderr, "\r%60s\r", "");
  }
  for (const bool partial : {false, true}) {
    double without = 0;
    for (const bool proofs : f.proofs ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
      o.partial = partial;
      o.proofs = proofs;
      const std::string mode = std::string(partial ? "c3po" : "plain") + (proofs ? "+proof" : "");
      const auto r = pipeline::bench_rollouts(
          *transformer, f.model, config, o, [&](int64_t step, double seconds) {
            std::fprintf(stderr, "\r  %s step %lld/%lld: %.2f s  ", mode.c_str(),
                         static_cast<long long>(step + 1), static_cast<long long>(o.steps),
                         seconds);
            std::fflush(stderr);
          });
      std::fprintf(stderr, "\r%60s\r", "");
      const double steps = static_cast<double>(r.steps);
      const double tokens_per_s = static_cast<double>(r.tokens) / r.seconds;
      std::printf(
          "%-12s %9.3f %9.0f %12.1f %13.0f %14.0f %10.0f %11.1f %8lld\n", mode.c_str(),
          r.seconds / steps, tokens_per_s,
          static_cast<double>(r.tokens) / static_cast<double>(std::max<int64_t>(1, r.forwards)),
          static_cast<double>(r.forwards) / steps, static_cast<double>(r.prefilled) / steps,
          static_cast<double>(r.tokens) / steps, r.completion_tokens,
          static_cast<long long>(r.dropped_groups));
      if (!proofs) {
        without = tokens_per_s;
      } else {
        overheads.push_back(fmt::format(
            "{}: with proofs {:+.1f}% tokens/s; proof threads busy {:.1f}% of the run: proving "
            "{:.2f} s, taking rows in {:.2f} s ({:.1f} us per generated token; {} bytes of proofs)",
            partial ? "c3po" : "plain", 100 * (tokens_per_s / without - 1),
            100 * (r.proving_seconds + r.adding_seconds) / r.seconds, r.proving_seconds,
            r.adding_seconds,
            1e6 * (r.proving_seconds + r.adding_seconds) / static_cast<double>(r.tokens),
            r.proof_bytes));
      }
    }
  }
  for (const auto& line : overheads) std::printf("%s\n", line.c_str());
}

struct BenchVerifyFlags {
  EnvFlags env;
  env::VerifyBenchOptions options;
};

void run_bench_verify(const BenchVerifyFlags& f) {
  const Config config = f.env.config();
  const auto environment = env::make_environment(config);
  auto o = f.options;
  o.difficulty = f.env.resolved_difficulty(config);
  if (environment->name() == "code") o.sandbox = env::SandboxLimits::from_config(config);
  std::printf("bench verify: %s, %lld tasks of difficulty %d, %d scoring threads\n",
              environment->name().c_str(), static_cast<long long>(o.tasks), o.difficulty,
              o.threads);
  const auto r = env::bench_verify(*environment, o);
  std::printf("%-22s %12s %14s\n", "completions", "tasks/s", "scored 1");
  std::printf("%-22s %12.1f %9lld/%lld\n", "reference solutions", r.correct_tasks_per_s,
              static_cast<long long>(r.correct_scored_1), static_cast<long long>(o.tasks));
  std::printf("%-22s %12.1f %9lld/%lld\n", "another task's answer", r.wrong_tasks_per_s,
              static_cast<long long>(r.wrong_scored_1), static_cast<long long>(o.tasks));
  std::printf("generator: %.1f tasks/s\n", r.generate_tasks_per_s);
  if (o.sandbox) {
    const double tests_per_s = r.correct_tasks_per_s * r.tests_per_task;
    std::printf(
        "sandbox: %.1f tests per task; reference solutions ran %.1f sandboxed tests/s, %.0f%% of "
        "the %.1f runs/s of an empty program (same threads, same run)\n",
        r.tests_per_task, tests_per_s, 100.0 * tests_per_s / r.empty_sandbox_runs_per_s,
        r.empty_sandbox_runs_per_s);
  }
}

struct BenchValidateFlags {
  std::string model;
  std::vector<std::string> configs;  // positional, before --config files
  EnvFlags env;
  std::string device = "cpu";        // the validator's (dishonest weights), and the workers'
  std::vector<std::string> devices;  // more devices workers and validators run on
  std::string dtype = "auto";        // the validator's
  int threads = 0;                   // run only the settings with this many threads; 0 = all
  std::vector<std::string> only;     // run only the settings whose name contains one of these
  validator::CalibrationOptions options;
};

std::string fmt_stat(double x, int decimals) {
  return std::isfinite(x) ? fmt::format("{:.{}f}", x, decimals) : "inf";
}

// "32/32", or "30/32 termination 2".
std::string fmt_pass(const validator::CheckSummary& c) {
  std::string s = fmt::format("{}/{}", c.passed, c.completions);
  for (const auto& [check, n] : c.failed) s += fmt::format(" {} {}", check, n);
  return s;
}

// Whether every completion of `c` passes the TOPLOC and sampling thresholds `t`: a completion is
// rejected when any of its chunks exceeds one of them, so the worst chunk decides (and, with no
// sampling misses allowed, the farthest u).
bool passes(const validator::CheckSummary& c, const validator::SuggestedThresholds& t) {
  return c.worst.exp_mismatches <= t.toploc.exp_mismatches &&
         c.worst.mant_err_mean <= t.toploc.mant_err_mean &&
         c.worst.mant_err_median <= t.toploc.mant_err_median &&
         c.max_sampling_distance <= t.sampling_tolerance &&
         c.max_logprob_error <= t.max_logprob_error;
}

// One row per setting (per dishonest weights when `weights`): the worst statistics, pass counts,
// and the speed of generation against validation on the same threads.
void print_rows(const char* title, const std::vector<validator::CalibrationRow>& rows,
                const validator::SuggestedThresholds& suggested, const validator::Rules& rules,
                bool weights = false) {
  std::printf("\n%s\n", title);
  std::printf(
      "%-22s %-9s %5s %6s %4s %6s %6s %11s %9s %8s %7s %-22s %9s %9s %9s %9s %9s %7s %7s %6s\n",
      weights ? "weights" : "worker", "validator", "compl", "tokens", "exp", "mean", "median",
      "file mean", "samp.dist", "lp.err", "p(stop)", "pass (current)", "suggested", "gen tok/s",
      "val tok/s", "pre tok/s", "pack tok/s", "val/gen", "preempt", "proof");
  for (const auto& r : rows) {
    const auto& c = r.check;
    const double gen = static_cast<double>(r.generated_tokens) / r.generation_seconds;
    const double val = static_cast<double>(c.tokens) / c.seconds;
    const double pre = static_cast<double>(c.tokens) / c.prefill_seconds;
    const double packed = static_cast<double>(c.tokens) / c.packed_seconds;
    const std::string file_mean = fmt::format("{}-{}", fmt_stat(c.min_group_mant_err_mean, 2),
                                              fmt_stat(c.max_group_mant_err_mean, 2));
    const std::string stop =
        c.min_stop_prob < 0 ? std::string("-") : fmt::format("{:.3f}", c.min_stop_prob);
    std::printf(
        "%-22s %-9s %5lld %6lld %4u %6s %6s %11s %9.2g %8.4f %7s %-22s %9s %9.0f %9.0f %9.0f "
        "%9.0f %6.1fx %7lld %4.1fus\n",
        weights ? r.validator.c_str() : r.worker.describe().c_str(),
        r.validator_compute.describe().c_str(), static_cast<long long>(c.completions),
        static_cast<long long>(c.tokens), c.worst.exp_mismatches,
        fmt_stat(c.worst.mant_err_mean, 2).c_str(), fmt_stat(c.worst.mant_err_median, 0).c_str(),
        file_mean.c_str(), c.max_sampling_distance, c.max_logprob_error, stop.c_str(),
        fmt_pass(c).c_str(), passes(c, suggested) ? "pass" : "FAIL", gen, val, pre, packed,
        val / gen, static_cast<long long>(r.preemptions),
        1e6 * r.proof_seconds / static_cast<double>(std::max<int64_t>(1, r.generated_tokens)));
    if (c.passed < c.completions) std::printf("    first objection: %s\n", c.first_reason.c_str());
    std::printf("    files of min_samples completions: %lld/%lld rejected by the file checks",
                static_cast<long long>(c.groups_rejected), static_cast<long long>(c.groups));
    if (c.max_group_fp8_ratio >= 0) {
      std::printf("; error without FP8 / in FP8 %s-%s (rejected as not FP8 below %g)",
                  fmt_stat(c.min_group_fp8_ratio, 2).c_str(),
                  fmt_stat(c.max_group_fp8_ratio, 2).c_str(), rules.fp8_precision_ratio);
    }
    std::printf("\n");
  }
}

void print_maxima(const char* what, const validator::HonestMaxima& m, int64_t min_samples) {
  std::printf(
      "%s: exponent mismatches %u, mantissa error mean %s, median %s; file-wide mean of %lld "
      "completions %s; sampling distance %.3g, misses %lld; log-prob error %.4f; smallest p(stop) "
      "%s\n",
      what, m.worst.exp_mismatches, fmt_stat(m.worst.mant_err_mean, 2).c_str(),
      fmt_stat(m.worst.mant_err_median, 0).c_str(), static_cast<long long>(min_samples),
      fmt_stat(m.max_group_mant_err_mean, 2).c_str(), m.max_sampling_distance,
      static_cast<long long>(m.max_sampling_misses), m.max_logprob_error,
      m.min_stop_prob < 0 ? "-" : fmt::format("{:.3f}", m.min_stop_prob).c_str());
  if (m.min_group_fp8_ratio >= 0) {
    std::printf("%s: FP8 precision check, error without FP8 / in FP8 of a file, at least %s\n",
                what, fmt_stat(m.min_group_fp8_ratio, 2).c_str());
  }
}

void run_bench_validate(BenchValidateFlags f) {
  f.env.config_files.insert(f.env.config_files.begin(), f.configs.begin(), f.configs.end());
  const Config config = f.env.config();
  auto o = f.options;
  o.validator = model::resolve_compute(f.device, f.dtype);
  auto devices = f.devices;
  if (std::find(devices.begin(), devices.end(), f.device) == devices.end())
    devices.insert(devices.begin(), f.device);
  for (const auto& device : devices) {
    // Each dtype the device runs natively: bf16 (a GPU, a CPU with AVX512-BF16 or AMX), fp32.
    const auto c = model::resolve_compute(device, "auto");
    if (c.bf16()) o.computes.push_back({c.device, torch::kBFloat16});
    o.computes.push_back({c.device, torch::kFloat32});
  }
  const auto rules = validator::Rules::from_config(config, 0);
  o.settings = validator::calibration_matrix(o.computes, rules.fp8);
  if (f.threads > 0) {
    std::erase_if(o.settings,
                  [&](const validator::WorkerSetting& w) { return w.threads != f.threads; });
  }
  if (!f.only.empty()) {
    std::erase_if(o.settings, [&](const validator::WorkerSetting& w) {
      return std::none_of(f.only.begin(), f.only.end(), [&](const std::string& part) {
        return w.describe().find(part) != std::string::npos;
      });
    });
  }
  if (o.settings.empty())
    throw Error(
        fmt::format("no worker setting matches --threads {} --only [{}]; they are named like "
                    "\"b8 t2 tight bf16\" (batch, threads: 1 or 2, KV-cache layout, dtype; "
                    "\"cuda\" off the CPU)",
                    f.threads, fmt::join(f.only, ", ")));
  const auto& t = rules.thresholds;
  std::printf(
      "bench validate: %s, env %s, G %lld, max_tokens %lld, temperature %g; %lld completions per "
      "setting; workers on %s, validator %s\n",
      f.model.c_str(), config.get<std::string>("env.name").c_str(),
      static_cast<long long>(rules.rollout.group_size),
      static_cast<long long>(rules.rollout.max_tokens), rules.rollout.sampling.temperature,
      static_cast<long long>(o.completions), fmt::format("{}", fmt::join(devices, ", ")).c_str(),
      o.validator.describe().c_str());
  std::printf(
      "current thresholds ([%s], rl.precision %s): toploc %u / %g / %g (file-wide mean %g), "
      "sampling tolerance %g, misses %lld, log-prob error %g, p(stop) > %g\n",
      rules.fp8 ? "validator.fp8" : "validator", config.get<std::string>("rl.precision").c_str(),
      t.exp_mismatches, t.mant_err_mean, t.mant_err_median, rules.toploc_file_mant_err_mean,
      rules.sampling_tolerance, static_cast<long long>(rules.max_sampling_misses),
      rules.max_logprob_error, rules.eos_min_prob);
  const double t0 =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const auto report = validator::calibrate(f.model, config, o, [](const std::string& what) {
    std::fprintf(stderr, "\r  %-60s", what.c_str());
    std::fflush(stderr);
  });
  std::fprintf(stderr, "\r%70s\r", "");
  std::printf(
      "the validator checks %lld completions at a time (one file's subset, one packed "
      "forward)\n",
      static_cast<long long>(report.checked_per_file));

  // The rule (docs/validation.md#calibration): twice the honest maxima (every honest row, the
  // other dtype's too) plus a little, never below the floor kept for what was not measured.
  validator::HonestMaxima honest = report.maxima;
  for (const auto& r : report.cross) honest.add(r.check);
  for (const auto& r : report.cross_device) honest.add(r.check);
  const auto suggested = validator::suggest_thresholds(honest, validator::unmeasured_floor());
  validator::SuggestedThresholds none;
  none.toploc = {0, 0, 0};
  const auto measured = validator::suggest_thresholds(honest, none);
  std::printf(
      "columns: worst chunk over all completions (exp = exponent mismatches, mantissa error mean "
      "and median), the file-wide mean mantissa error of groups of min_samples completions (lowest "
      "- highest), largest sampling distance and mean log-prob error of a completion, smallest "
      "p(stop); completions passing the per-completion checks under the current thresholds (the "
      "file-wide mean is judged per file), and all passing under the suggested ones (toploc and "
      "sampling); tokens/s of generation (generate_rollouts with proofs), of validation "
      "(check_samples: packed prefill and checks), of its prefills one completion at a time and "
      "packed into forwards of 4096 tokens, same threads; the proof "
      "threads' time per generated token\n");
  print_rows("Honest workers, validator on the worker's device, in its dtype:", report.honest,
             suggested, rules);
  print_rows("Honest workers, validator on the worker's device, in the other dtype:", report.cross,
             suggested, rules);
  if (!report.cross_device.empty()) {
    print_rows("Honest workers, validator on the other device:", report.cross_device, suggested,
               rules);
  }
  if (!report.dishonest.empty()) {
    print_rows(("Dishonest weights: the completions of " + report.dishonest[0].worker.describe() +
                " checked against other weights, and the same setting rolled out in the other "
                "precision checked against the honest weights:")
                   .c_str(),
               report.dishonest, suggested, rules, /*weights=*/true);
  }
  std::printf("\n");
  print_maxima("honest maxima, same dtype", report.maxima, rules.min_samples);
  if (!report.cross.empty())
    print_maxima("honest maxima, other dtype", report.cross_maxima, rules.min_samples);
  if (!report.cross_device.empty())
    print_maxima("honest maxima, other device", report.cross_device_maxima, rules.min_samples);
  const auto print_thresholds = [](const char* what, const validator::SuggestedThresholds& t) {
    std::printf("%s: toploc %u / %g / %g, sampling tolerance %g, misses %lld, log-prob error %g\n",
                what, t.toploc.exp_mismatches, t.toploc.mant_err_mean, t.toploc.mant_err_median,
                t.sampling_tolerance, static_cast<long long>(t.max_sampling_misses),
                t.max_logprob_error);
  };
  print_thresholds(
      "rule over every honest row (2x + 2 mismatches, 2x + 1 mantissa errors, 2x sampling "
      "distance and log-prob error rounded up to 1-2-5)",
      measured);
  print_thresholds("suggested (the rule, at least strict 38 / 10 / 8, 0.1, 0, 0.05)", suggested);
  for (const auto& r : report.dishonest) {
    const auto& l = r.check.least;
    std::printf(
        "dishonest %-14s closest completion: %u mismatches, mean %s, median %s; file-wide mean "
        ">= %s; log-prob error >= %.4f; %lld/%lld completions rejected under the current "
        "thresholds\n",
        r.validator.c_str(), l.exp_mismatches, fmt_stat(l.mant_err_mean, 2).c_str(),
        fmt_stat(l.mant_err_median, 0).c_str(),
        fmt_stat(r.check.min_group_mant_err_mean, 2).c_str(), r.check.min_logprob_error,
        static_cast<long long>(r.check.completions - r.check.passed),
        static_cast<long long>(r.check.completions));
  }
  // Each setting's validation rate over its generation rate (same dtype, same threads); a
  // validator checks only rules.sample_fraction of a file's completions (at least min_samples).
  std::vector<double> ratios;
  for (const auto& r : report.honest) {
    ratios.push_back((static_cast<double>(r.check.tokens) / r.check.seconds) /
                     (static_cast<double>(r.generated_tokens) / r.generation_seconds));
  }
  std::sort(ratios.begin(), ratios.end());
  if (!ratios.empty()) {
    const double median = ratios[ratios.size() / 2];
    std::printf(
        "validation vs generation (same dtype, same threads), per checked token: %.1fx .. %.1fx, "
        "median %.1fx; per submitted token at sample_fraction %g: median %.1fx\n",
        ratios.front(), ratios.back(), median, rules.sample_fraction,
        rules.sample_fraction > 0 ? median / rules.sample_fraction : median);
  }
  std::printf(
      "%.0f s in all\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() -
          t0);
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks that report throughput and utilisation");
  bench->require_subcommand(1);
  static BenchTrainFlags f;
  auto* train = bench->add_subcommand(
      "train", "Full RL trainer steps (logp_old, loss, backward, AdamW): tokens/s and MFU");
  train->add_option("--model", f.model, "Hugging Face model directory")->required();
  auto count = [&](const char* name, int64_t& value, const char* help) {
    train->add_option(name, value, help)
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  };
  count("--batch", f.options.batch, "rollouts per step");
  count("--prompt-len", f.options.prompt_len, "prompt tokens per rollout");
  count("--completion-len", f.options.completion_len,
        "completion tokens per rollout at most (drawn from [len/2, len])");
  count("--steps", f.options.steps, "timed steps (after one warm-up step)");
  count("--optimizer-steps", f.options.optimizer_steps, "optimizer steps per rollout step");
  count("--micro-batch-tokens", f.options.micro_batch_tokens, "tokens per packed micro-batch");
  train->add_option("--seed", f.options.seed, "data seed")->capture_default_str();
  train->add_flag("--fp8", f.options.fp8,
                  "forward and backward in FP8 (rl.precision = fp8; emulated on CPU)");
  train->add_flag("--activation-checkpointing", f.options.activation_checkpointing,
                  "recompute each layer in the backward pass (trainer.activation_checkpointing)");
  add_compute_flags(train, f.compute);
  train->callback([] { run_bench_train(f); });

  static BenchGenerateFlags g;
  auto* gen = bench->add_subcommand(
      "generate", "Concurrent generation through the engine: tokens/s and FLOP utilisation");
  gen->add_option("--model", g.model, "Hugging Face model directory")->required();
  gen->add_option("--batch", g.options.batch, "concurrent sequences")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  gen->add_option("--prompt-len", g.options.prompt_len, "tokens per (random) prompt")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  gen->add_option("--max-tokens", g.options.max_tokens, "tokens generated per sequence")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  gen->add_option("--max-batch-tokens", g.options.max_batch_tokens,
                  "tokens per forward (decodes plus prefill chunks)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  gen->add_option("--seed", g.options.seed, "prompt and sampling seed")->capture_default_str();
  gen->add_flag("--fp8", g.options.fp8,
                "linear layers in FP8 (rl.precision = fp8-rollout or fp8; emulated on CPU)");
  gen->add_flag("--eager", g.options.eager,
                "run every step op by op, without recorded decode graphs (CUDA)");
  add_compute_flags(gen, g.compute);

  static BenchRolloutsFlags ro;
  auto* rollouts = bench->add_subcommand(
      "rollouts",
      "The rollout phase of RL steps, plain vs C3PO++ workers: seconds per step, decode batch");
  rollouts->add_option("--model", ro.model, "Hugging Face model directory")->required();
  add_env_flags(rollouts, ro.env, /*env_required=*/false);
  rollouts->add_option("--steps", ro.options.steps, "rollout steps per mode")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  ro.options.groups_per_step = 0;
  rollouts
      ->add_option("--groups-per-step", ro.options.groups_per_step,
                   "whole groups each step needs; default rl.batch_size / rl.group_size")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  rollouts->add_flag("--proofs", ro.proofs,
                     "run each mode also with TOPLOC proofs built while decoding, and report "
                     "their cost");
  add_compute_flags(rollouts, ro.compute);
  rollouts->callback([] { run_bench_rollouts(ro); });

  static BenchVerifyFlags v;
  auto* verify = bench->add_subcommand(
      "verify", "Verifier throughput: tasks/s scoring correct and wrong answers");
  add_env_flags(verify, v.env, /*env_required=*/true);
  verify->add_option("--n", v.options.tasks, "generated tasks to score")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  add_difficulty_flag(verify, v.env);
  verify->add_option("--seed", v.options.seed, "generator seed")->capture_default_str();
  verify->add_option("--threads", v.options.threads, "threads scoring at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  verify->callback([] { run_bench_verify(v); });
  gen->callback([] { run_bench_generate(g); });

  static BenchValidateFlags va;
  auto* validate = bench->add_subcommand(
      "validate",
      "Calibration: honest rollouts across batch sizes, threads, KV-cache layouts and dtypes "
      "checked by the validator (and dishonest weights); validation vs generation tokens/s");
  validate->add_option("--model", va.model, "Hugging Face model directory")->required();
  validate->add_option("config", va.configs, "TOML config files (before any --config)")
      ->check(CLI::ExistingFile);
  add_env_flags(validate, va.env, /*env_required=*/false);
  validate
      ->add_option("--completions", va.options.completions,
                   "honest completions per worker setting (at least its batch)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  validate
      ->add_option("--device", va.device,
                   "cpu | cuda: the workers' and validator's (the one the dishonest weights are "
                   "checked by)")
      ->capture_default_str();
  validate
      ->add_option("--devices", va.devices,
                   "more devices, e.g. cpu,cuda: workers and validators run on each, and every "
                   "worker's completions are checked on every device (a CUDA worker by a CPU "
                   "validator and the reverse)")
      ->delimiter(',');
  validate->add_option("--dtype", va.dtype, "the validator's compute dtype: auto | bf16 | fp32")
      ->capture_default_str();
  validate
      ->add_option("--threads", va.threads,
                   "only the worker settings with this many threads (the validator checks on "
                   "the same); 0 = every setting")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  validate->add_option("--only", va.only,
                       "run only the settings whose name contains this, e.g. \"t1\" or \"b8 t2 "
                       "tight\" (repeatable; names as in the table)");
  validate
      ->add_option("--noise", va.options.noise,
                   "dishonest weights: relative Gaussian noise (and a tenth of it)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  validate->add_option("--seed", va.options.seed, "seed of the noise and of the other weights")
      ->capture_default_str();
  validate->callback([] { run_bench_validate(va); });
}

}  // namespace trellis::cli
