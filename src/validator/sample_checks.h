// The checks of one sampled completion that need the policy (specs/toploc.md §3, §4): one
// prefill of prompt + completion[0 .. N-2] per policy version the completion claims gives the
// final hidden rows and the logits of every completion token, and from them
//   toploc       the worker's proof against our committed rows (positions P .. P+N-2)
//   sampling     verifiable sampling: each token's u, regenerated from (seed, position), lies in
//                the token's interval of our distribution, up to Rules::sampling_tolerance plus
//                what one bf16 rounding step of every logit can move it (an honest worker's LM
//                head rounds its logits too); the behaviour log-probs agree with ours on average
//                (Rules::max_logprob_error)
//   termination  with Rules::eos_min_prob > 0, a completion ending on a stop token had p(stop)
//                above it there
// Row i of the prefill (position P-1+i) produced token i, so it is computed with the version that
// sampled token i: a C3PO++ completion that spans versions is recomputed piecewise, exactly as the
// engine re-prefilled it after each weight swap.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "model/transformer.h"
#include "rollout/rollout_record.h"
#include "toploc/verify.h"
#include "validator/finding.h"
#include "validator/rules.h"

namespace trellis::validator {

// The policy of a version, loaded (the validator's policy cache, or one model offline).
using ModelOf = std::function<model::Transformer&(int64_t version)>;

// What the checks measured on one completion (the calibration reads these).
struct SampleStats {
  int64_t tokens = 0;
  toploc::Verdict toploc;  // per chunk: exponent mismatches, mantissa error mean/median
  // The farthest any u lay outside its token's interval, beyond the slack of one bf16 rounding
  // step in every logit (sample_checks.cpp: rounding_slack); 0 when every u was within it.
  double max_sampling_distance = 0;
  int64_t sampling_misses = 0;  // tokens farther than Rules::sampling_tolerance
  double logprob_error = 0;     // mean |behaviour log-prob - recomputed log-prob|
  double stop_prob = -1;        // p(last token) when the completion ends on a stop token
  // In an FP8 run (Rules::fp8): the proof against the rows recomputed without FP8, the precision
  // a worker claiming FP8 must not have used (check_file_average). Empty otherwise.
  toploc::Verdict toploc_without_fp8;
};

struct SampleResult {
  std::vector<Finding> findings;  // empty: the completion passed every check
  SampleStats stats;
};

// Checks row `row_index` of a file. `vocab` is the tokenizer's size (the engine samples ids below
// it; the model's logits bound it too); `stops` the stop ids. The row's fields are range-checked
// first (check_row_fields, file_checks.h): a row that fails is a "schema" finding, not recomputed.
// CannotJudge (not a finding) when our own recomputed rows are not finite: the validator, not the
// worker, cannot judge then. Exceptions of `model_of` pass through.
SampleResult check_sample(const rollout::RolloutRecord& row, size_t row_index, const Rules& rules,
                          const std::vector<int32_t>& stops, int64_t vocab,
                          const ModelOf& model_of);

// check_sample for several rows of a file (`row_indices` name them in reasons), recomputed with
// one packed forward per claimed version: how a validator checks its random subset.
std::vector<SampleResult> check_samples(const std::vector<const rollout::RolloutRecord*>& rows,
                                        const std::vector<size_t>& row_indices, const Rules& rules,
                                        const std::vector<int32_t>& stops, int64_t vocab,
                                        const ModelOf& model_of);

// Worst statistics over chunks (0 for an empty verdict).
toploc::ChunkStats worst_chunk(const toploc::Verdict& verdict);
// Raises each statistic of `worst` to `stats`' where that is larger.
void keep_worst(toploc::ChunkStats& worst, const toploc::ChunkStats& stats);

// The mantissa error averaged over every chunk of several completions (chunks without an exponent
// match, whose error is infinite, count as 127), and how many chunks that is. Honest noise is
// independent from chunk to chunk, so this average varies far less than one chunk's statistic:
// a file-wide threshold on it (Rules::toploc_file_mant_err_mean) catches weights or precision
// that shift every chunk a little, which a per-chunk threshold must let through.
struct ChunkAverage {
  int64_t chunks = 0;
  double mant_err_mean = 0;
};
ChunkAverage average_chunks(const std::vector<SampleStats>& samples,
                            toploc::Verdict SampleStats::*verdict = &SampleStats::toploc);

// The checks of a file's checked completions together:
//   toploc     their chunks' average mantissa error is at most Rules::toploc_file_mant_err_mean
//   precision  in an FP8 run, they do not match the policy computed without FP8 far better than
//              in FP8 (Rules::fp8_precision_ratio). An honest FP8 worker's rows differ from ours
//              by FP8's rounding noise, which on a trained model is as large as the difference
//              between FP8 and bf16 rows, so no threshold on the distance tells them apart; the
//              comparison does: a bf16 worker's rows lie 3-4 times closer to the recomputation
//              without FP8, an honest worker's no closer than 0.88 times (docs/validation.md#fp8).
std::vector<Finding> check_file_average(const std::vector<SampleStats>& samples,
                                        const Rules& rules);

}  // namespace trellis::validator
