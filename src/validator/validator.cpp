#include "validator/validator.h"

#include <algorithm>
#include <cmath>

#include "common/clock.h"
#include "common/error.h"
#include "common/exception_message.h"
#include "env/registry.h"
#include "rl/rl_loop.h"
#include "rollout/signing.h"
#include "validator/budget.h"

namespace trellis::validator {
namespace {

// Completions recomputed per packed forward: the budget is checked between forwards.
constexpr size_t kRowsPerForward = 16;

// "rows 3, 7, 9" for a reason.
std::string row_list(const std::vector<size_t>& rows) {
  std::string out = rows.size() == 1 ? "row " : "rows ";
  for (size_t i = 0; i < rows.size(); ++i) out += (i ? ", " : "") + std::to_string(rows[i]);
  return out;
}

// Every row must be the expected submission's: the orchestrator checked this at upload, and a
// validator trusts nothing it did not check itself.
std::optional<Finding> check_binding(const rollout::RolloutFile& file, const Expected& e) {
  for (size_t i = 0; i < file.rows.size(); ++i) {
    const auto& r = file.rows[i];
    if (r.run_id != e.run_id || r.node_address != e.node_address || r.step != e.step ||
        r.submission != e.submission) {
      return Finding{"step binding",
                     fmt::format("row {} belongs to run {}, node {}, step {}, submission {}, not "
                                 "to this submission (run {}, node {}, step {}, submission {})",
                                 i, r.run_id, r.node_address, r.step, r.submission, e.run_id,
                                 e.node_address, e.step, e.submission)};
    }
  }
  try {
    rollout::verify_file_signature(file, e.node_address, "the submission");
  } catch (const Error& err) {
    return Finding{"signature", err.what()};
  }
  return std::nullopt;
}

}  // namespace

std::string Report::summary() const {
  toploc::ChunkStats worst;
  double distance = 0, logprob = 0;
  for (const auto& s : samples) {
    keep_worst(worst, worst_chunk(s.toploc));
    distance = std::max(distance, s.max_sampling_distance);
    logprob = std::max(logprob, s.logprob_error);
  }
  const double seconds = file_seconds + model_seconds;
  const ChunkAverage average = average_chunks(samples);
  return fmt::format(
      "{} rows ({} tokens), {} checked by prefill ({} tokens): worst chunk {} exponent mismatches, "
      "mantissa error mean {:.2f} median {:.0f}, {} chunks average {:.2f}; sampling distance "
      "{:.2g}, log-prob error {:.3f}; {:.2f} s ({:.2f} s file checks), {:.0f} tokens/s validated",
      rows, tokens, checked, checked_tokens, worst.exp_mismatches, worst.mant_err_mean,
      worst.mant_err_median, average.chunks, average.mant_err_mean, distance, logprob, seconds,
      file_seconds, static_cast<double>(tokens) / std::max(seconds, 1e-9));
}

Validator::Validator(const Config& config, const model::Prompting& prompting, ModelOf model_of,
                     ModelLimits limits)
    : prompting_(prompting),
      model_of_(std::move(model_of)),
      limits_(limits),
      environment_(env::make_environment(config)),
      stops_(stop_ids(prompting)),
      rng_(std::random_device{}()) {
  // The task source of every worker (inference_worker.cpp): the run's seed orders it.
  tasks_ = std::make_unique<rl::TaskSource>(*environment_, config,
                                            rl::RlLoopConfig::from_config(config).seed);
  rules_ = std::make_unique<Rules>(Rules::from_config(config, tasks_->dataset_size()));
}

std::vector<size_t> Validator::choose_rows(size_t rows) {
  const auto want = std::max<size_t>(
      static_cast<size_t>(rules_->min_samples),
      static_cast<size_t>(std::ceil(rules_->sample_fraction * static_cast<double>(rows))));
  std::vector<size_t> all(rows);
  for (size_t i = 0; i < rows; ++i) all[i] = i;
  std::shuffle(all.begin(), all.end(), rng_);
  all.resize(std::min(rows, want));
  std::sort(all.begin(), all.end());
  return all;
}

void Validator::check_models(const rollout::RolloutFile& file, Budget& budget, Report& report) {
  int64_t vocab = prompting_.tok.vocab_size();
  if (limits_.vocab > 0) vocab = std::min(vocab, limits_.vocab);
  // A policy download is not the file's doing: its time is not charged to the file's budget.
  const ModelOf timed = [&](int64_t version) -> model::Transformer& {
    const double t = monotonic_seconds();
    auto& model = model_of_(version);
    budget.exclude(monotonic_seconds() - t);
    return model;
  };
  const auto chosen = choose_rows(file.rows.size());
  for (size_t begin = 0; begin < chosen.size(); begin += kRowsPerForward) {
    const std::vector<size_t> part(chosen.begin() + static_cast<std::ptrdiff_t>(begin),
                                   chosen.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                        chosen.size(), begin + kRowsPerForward)));
    if (budget.spent()) {
      report.findings.push_back(budget.finding("the model checks of " + row_list(part)));
      return;
    }
    std::vector<const rollout::RolloutRecord*> rows;
    for (size_t i : part) rows.push_back(&file.rows[i]);
    try {
      for (auto& result : check_samples(rows, part, *rules_, stops_, vocab, timed)) {
        ++report.checked;
        report.checked_tokens += result.stats.tokens;
        report.samples.push_back(std::move(result.stats));
        report.findings.insert(report.findings.end(), result.findings.begin(),
                               result.findings.end());
      }
    } catch (const CannotJudge&) {
      throw;
    } catch (const std::exception& e) {
      report.findings.push_back({"prefill", fmt::format("{}: recomputing them failed: {}",
                                                        row_list(part), message_of(e))});
      return;
    }
  }
  for (auto& f : check_file_average(report.samples, *rules_))
    report.findings.push_back(std::move(f));
  if (budget.spent()) report.findings.push_back(budget.finding("the end of the model checks"));
}

Report Validator::validate(std::string_view bytes, const Expected& expected) {
  Report report;
  const double t0 = monotonic_seconds();
  Budget budget(rules_->max_file_seconds);
  auto& findings = report.findings;
  rollout::RolloutFile file;
  try {
    file = rollout::decode_rollout_file(bytes, "the submission");
  } catch (const std::exception& e) {
    findings.push_back({"schema", message_of(e)});
  }
  report.rows = static_cast<int64_t>(file.rows.size());
  for (const auto& r : file.rows) report.tokens += static_cast<int64_t>(r.completion_tokens.size());
  if (findings.empty()) {
    try {
      if (auto f = check_binding(file, expected)) findings.push_back(*f);
    } catch (const std::exception& e) {
      findings.push_back({"signature", message_of(e)});
    }
  }
  if (findings.empty()) {
    const FileContext context{*rules_, *environment_, *tasks_, prompting_, limits_, &budget, &rng_};
    try {
      findings = check_file(file, context, expected.policy_version, &seen_);
    } catch (const CannotJudge&) {
      throw;
    } catch (const std::exception& e) {  // check_file names its own; this is the last resort
      findings.push_back({"schema", fmt::format("the file checks failed: {}", message_of(e))});
    }
  }
  report.file_seconds = monotonic_seconds() - t0;
  if (findings.empty()) check_models(file, budget, report);
  report.model_seconds = monotonic_seconds() - t0 - report.file_seconds;
  report.accepted = findings.empty();
  constexpr size_t kListed = 4;  // the orchestrator keeps reasons short
  for (size_t i = 0; i < std::min(findings.size(), kListed); ++i)
    report.reason += (i ? "; " : "") + findings[i].text();
  if (findings.size() > kListed)
    report.reason += fmt::format("; and {} more findings", findings.size() - kListed);
  last_draws_.clear();
  if (report.accepted) remember_draws(file, rules_->partial_rollouts, last_draws_);
  return report;
}

void Validator::accepted() {
  seen_.insert(last_draws_.begin(), last_draws_.end());
  last_draws_.clear();
}

}  // namespace trellis::validator
