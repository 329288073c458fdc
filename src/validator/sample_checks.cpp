#include "validator/sample_checks.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/error.h"
#include "engine/sampler.h"
#include "toploc/proof_builder.h"
#include "validator/file_checks.h"

namespace trellis::validator {
namespace {

// Our recomputation of one completion, on the CPU whatever device computed it: logits of every
// completion token [N, V] (fp32) and the final hidden rows [N, H] of the positions that produced
// them, each from the token's version.
struct Recomputed {
  torch::Tensor logits, hidden;
};

// Recomputes several completions with one packed forward per policy version they claim (a
// forward of many short sequences costs little more than one of a single sequence).
std::vector<Recomputed> recompute(const std::vector<const rollout::RolloutRecord*>& rows,
                                  const ModelOf& model_of, bool fp8) {
  std::map<int32_t, std::vector<size_t>> by_version;  // version -> the rows claiming it
  for (size_t r = 0; r < rows.size(); ++r) {
    std::set<int32_t> versions(rows[r]->token_versions.begin(), rows[r]->token_versions.end());
    for (int32_t v : versions) by_version[v].push_back(r);
  }
  torch::NoGradGuard no_grad;
  std::vector<Recomputed> out(rows.size());
  for (const auto& [version, members] : by_version) {
    std::vector<int64_t> tokens, positions, seq_lens, selected;
    for (size_t r : members) {
      const auto& row = *rows[r];
      const auto p = static_cast<int64_t>(row.prompt_tokens.size());
      const auto n = static_cast<int64_t>(row.completion_tokens.size());
      const auto start = static_cast<int64_t>(tokens.size());
      tokens.insert(tokens.end(), row.prompt_tokens.begin(), row.prompt_tokens.end());
      tokens.insert(tokens.end(), row.completion_tokens.begin(), row.completion_tokens.end() - 1);
      for (int64_t i = 0; i < p + n - 1; ++i) positions.push_back(i);
      seq_lens.push_back(p + n - 1);
      for (int64_t i = 0; i < n; ++i) selected.push_back(start + p - 1 + i);
    }
    const auto fwd = model_of(version).forward_packed(
        torch::tensor(tokens), torch::tensor(positions), seq_lens,
        {.logits = true, .hidden = true, .rows = torch::tensor(selected), .fp8 = fp8});
    // The checks read the rows on the host: one copy per forward from an accelerator.
    const auto all_logits = fwd.logits.to(torch::kCPU), all_hidden = fwd.hidden.to(torch::kCPU);
    int64_t offset = 0;
    for (size_t r : members) {
      const auto& row = *rows[r];
      const auto n = static_cast<int64_t>(row.completion_tokens.size());
      const auto logits = all_logits.slice(0, offset, offset + n);
      const auto hidden = all_hidden.slice(0, offset, offset + n);
      offset += n;
      Recomputed& o = out[r];
      if (!o.logits.defined()) {
        o.logits = logits.clone();
        o.hidden = hidden.clone();
        continue;
      }
      std::vector<int64_t> mine;  // the tokens this version sampled
      for (int64_t i = 0; i < n; ++i)
        if (row.token_versions[i] == version) mine.push_back(i);
      const auto idx = torch::tensor(mine);
      o.logits.index_copy_(0, idx, logits.index_select(0, idx));
      o.hidden.index_copy_(0, idx, hidden.index_select(0, idx));
    }
  }
  return out;
}

// How far an honest worker's cumulative distribution may lie from ours in each row. Logits come
// out of the LM head in the compute dtype, so an honest worker's logit can differ from ours by
// one bf16 rounding step (its matmul adds in another order and lands on the other side of a
// rounding boundary). Moving every logit l_j by up to ulp(l_j) moves a token's interval by at
// most about sum_j p_j ulp(l_j) / T: one step of the logits the distribution's mass sits on. A
// confident row (logits near 20, ulp 0.125) gets a few percent; a flat row almost nothing.
torch::Tensor rounding_slack(const torch::Tensor& logits, const torch::Tensor& logprobs,
                             double temperature) {
  constexpr int kBf16MantissaBits = 7;
  const auto magnitude = logits.to(torch::kFloat64).abs().clamp_min(1e-30);
  const auto ulp = torch::pow(2.0, torch::floor(torch::log2(magnitude)) - kBf16MantissaBits);
  return (logprobs.exp() * ulp).sum(1) / temperature;
}

}  // namespace

void keep_worst(toploc::ChunkStats& worst, const toploc::ChunkStats& stats) {
  worst.exp_mismatches = std::max(worst.exp_mismatches, stats.exp_mismatches);
  worst.mant_err_mean = std::max(worst.mant_err_mean, stats.mant_err_mean);
  worst.mant_err_median = std::max(worst.mant_err_median, stats.mant_err_median);
}

toploc::ChunkStats worst_chunk(const toploc::Verdict& verdict) {
  toploc::ChunkStats w;
  for (const auto& c : verdict.chunks) keep_worst(w, c.stats);
  return w;
}

ChunkAverage average_chunks(const std::vector<SampleStats>& samples,
                            toploc::Verdict SampleStats::*verdict) {
  constexpr double kWorstMantissaError = 127;  // 7 mantissa bits
  ChunkAverage a;
  double sum = 0;
  for (const auto& s : samples) {
    for (const auto& c : (s.*verdict).chunks) {
      sum += std::min(c.stats.mant_err_mean, kWorstMantissaError);
      ++a.chunks;
    }
  }
  a.mant_err_mean = a.chunks ? sum / static_cast<double>(a.chunks) : 0;
  return a;
}

std::vector<Finding> check_file_average(const std::vector<SampleStats>& samples,
                                        const Rules& rules) {
  std::vector<Finding> findings;
  const ChunkAverage average = average_chunks(samples);
  if (average.mant_err_mean > rules.toploc_file_mant_err_mean) {
    findings.push_back(
        {"toploc",
         fmt::format("the {} proof chunks checked average a mantissa error of {:.2f}, "
                     "above {} (not the claimed weights or precision)",
                     average.chunks, average.mant_err_mean, rules.toploc_file_mant_err_mean)});
  }
  if (rules.fp8) {
    const ChunkAverage without = average_chunks(samples, &SampleStats::toploc_without_fp8);
    if (without.chunks == average.chunks &&
        without.mant_err_mean < rules.fp8_precision_ratio * average.mant_err_mean) {
      findings.push_back(
          {"precision",
           fmt::format("the {} proof chunks checked match the policy computed without FP8 "
                       "(mantissa error {:.2f}) far better than in FP8 ({:.2f}, ratio below {}): "
                       "not rolled out in FP8, as the run's rl.precision says",
                       average.chunks, without.mant_err_mean, average.mant_err_mean,
                       rules.fp8_precision_ratio)});
    }
  }
  return findings;
}

namespace {

// `without_fp8`: in an FP8 run, the same rows recomputed without FP8 (else undefined).
SampleResult judge(const rollout::RolloutRecord& row, size_t row_index, const Rules& rules,
                   const std::vector<int32_t>& stops, int64_t vocab, const Recomputed& r,
                   const Recomputed* without_fp8) {
  SampleResult result;
  auto& s = result.stats;
  const auto p = static_cast<int64_t>(row.prompt_tokens.size());
  const auto n = static_cast<int64_t>(row.completion_tokens.size());
  s.tokens = n;
  if (!torch::isfinite(r.hidden).all().item<bool>() ||
      !torch::isfinite(r.logits).all().item<bool>())
    throw CannotJudge(
        "the validator's own prefill produced non-finite values; it cannot judge this row",
        fmt::format("row {}", row_index));
  // The model's logits may be narrower than the tokenizer (ids were checked below `vocab`).
  vocab = std::min<int64_t>(vocab, r.logits.size(1));
  for (int64_t i = 0; i < n; ++i) {
    if (row.completion_tokens[i] >= vocab) {
      result.findings.push_back(
          {"schema", fmt::format("row {}: completion token id {} is outside the model's "
                                 "vocabulary (0..{})",
                                 row_index, row.completion_tokens[i], vocab - 1)});
      return result;
    }
  }

  // TOPLOC: the committed rows are 1 .. N-1 (the prefill row that produced token 0 is not).
  if (rules.proofs || !row.proof.empty()) {
    const auto committed = toploc::bf16_bits(r.hidden.slice(0, 1, n));
    s.toploc = toploc::verify_proof(row.proof, committed, static_cast<size_t>(r.hidden.size(1)),
                                    rules.thresholds, rules.proof);
    if (!s.toploc.accepted)
      result.findings.push_back({"toploc", fmt::format("row {}: {}", row_index, s.toploc.reason)});
    if (without_fp8) {
      s.toploc_without_fp8 = toploc::verify_proof(
          row.proof, toploc::bf16_bits(without_fp8->hidden.slice(0, 1, n)),
          static_cast<size_t>(r.hidden.size(1)), rules.thresholds, rules.proof);
    }
  }

  // Verifiable sampling, behaviour log-probs and the stop token's probability.
  const engine::SamplingParams& sampling = rules.rollout.sampling;
  const double t = sampling.temperature > 0 ? sampling.temperature : 1.0;
  const auto logits = r.logits.slice(1, 0, vocab).contiguous();
  const auto logprobs = torch::log_softmax(logits.to(torch::kFloat64) / t, 1);
  const auto targets = torch::tensor(
      std::vector<int64_t>(row.completion_tokens.begin(), row.completion_tokens.end()));
  const auto chosen = logprobs.gather(1, targets.unsqueeze(1)).squeeze(1).contiguous();
  const double* lp = chosen.data_ptr<double>();
  const auto slack = rounding_slack(logits, logprobs, t).contiguous();
  const double* slack_of = slack.data_ptr<double>();
  const float* rows = logits.data_ptr<float>();
  int64_t first_miss = -1;
  double logprob_error = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t token = row.completion_tokens[i];
    const double u = engine::sampling_uniform(static_cast<uint64_t>(row.seed), p + i);
    const auto in = engine::token_interval(rows + i * vocab, vocab, sampling, token);
    const double outside = u < in.lo ? in.lo - u : (u >= in.hi ? u - in.hi : 0.0);
    const double distance = std::max(0.0, outside - slack_of[i]);
    s.max_sampling_distance = std::max(s.max_sampling_distance, distance);
    if (distance > rules.sampling_tolerance && s.sampling_misses++ == 0) first_miss = i;
    logprob_error += std::abs(static_cast<double>(row.completion_logprobs[i]) - lp[i]);
  }
  s.logprob_error = logprob_error / static_cast<double>(n);
  if (s.sampling_misses > rules.max_sampling_misses) {
    const int64_t i = first_miss;
    result.findings.push_back(
        {"sampling",
         fmt::format("row {}: {} of {} tokens lie outside their sampling interval (the first is "
                     "token {} = {}, of probability {:.3g}; the farthest u lies {:.3g} outside)",
                     row_index, s.sampling_misses, n, i, row.completion_tokens[i], std::exp(lp[i]),
                     s.max_sampling_distance)});
  } else if (s.logprob_error > rules.max_logprob_error) {
    result.findings.push_back(
        {"sampling", fmt::format("row {}: behaviour log-probs differ from the policy's by {:.4f} "
                                 "per token on average (at most {} allowed)",
                                 row_index, s.logprob_error, rules.max_logprob_error)});
  }
  const int32_t last = row.completion_tokens.back();
  if (std::find(stops.begin(), stops.end(), last) != stops.end()) {
    s.stop_prob = std::exp(lp[n - 1]);
    if (rules.eos_min_prob > 0 && s.stop_prob <= rules.eos_min_prob)
      result.findings.push_back(
          {"termination", fmt::format("row {}: ends on stop token {} whose probability there is "
                                      "{:.3g}, not above {}",
                                      row_index, last, s.stop_prob, rules.eos_min_prob)});
  }
  return result;
}

}  // namespace

std::vector<SampleResult> check_samples(const std::vector<const rollout::RolloutRecord*>& rows,
                                        const std::vector<size_t>& row_indices, const Rules& rules,
                                        const std::vector<int32_t>& stops, int64_t vocab,
                                        const ModelOf& model_of) {
  // Rows whose fields are not sane are findings, and are not recomputed.
  std::vector<SampleResult> results(rows.size());
  std::vector<const rollout::RolloutRecord*> sane;
  std::vector<size_t> sane_at;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (auto f = check_row_fields(*rows[r], row_indices[r], rules, vocab, 0)) {
      results[r].findings.push_back(std::move(*f));
    } else {
      sane.push_back(rows[r]);
      sane_at.push_back(r);
    }
  }
  if (sane.empty()) return results;
  const auto recomputed = recompute(sane, model_of, rules.fp8);
  std::vector<Recomputed> without_fp8;  // for the precision check (check_file_average)
  if (rules.fp8 && (rules.proofs || std::any_of(sane.begin(), sane.end(), [](const auto* row) {
                      return !row->proof.empty();
                    })))
    without_fp8 = recompute(sane, model_of, false);
  for (size_t k = 0; k < sane.size(); ++k) {
    const size_t r = sane_at[k];
    results[r] = judge(*rows[r], row_indices[r], rules, stops, vocab, recomputed[k],
                       without_fp8.empty() ? nullptr : &without_fp8[k]);
  }
  return results;
}

SampleResult check_sample(const rollout::RolloutRecord& row, size_t row_index, const Rules& rules,
                          const std::vector<int32_t>& stops, int64_t vocab,
                          const ModelOf& model_of) {
  return check_samples({&row}, {row_index}, rules, stops, vocab, model_of).front();
}

}  // namespace trellis::validator
