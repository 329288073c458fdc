// What an honest submission of a run follows, read once from the run's configuration: how workers
// sample (group size, max tokens, temperature), how rewards and advantages are computed, which
// prompts and seeds fixed data sampling assigns, and how strictly a validator judges proofs and
// sampled tokens ([validator], [toploc]). The validator's checks (file_checks.h, sample_checks.h)
// compare each submission against these rules; nothing here is taken from the submission itself.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "rl/rollouts.h"
#include "toploc/proof.h"
#include "toploc/verify.h"

namespace trellis::validator {

// What the policy's architecture admits (0 = unknown): token ids below `vocab` (the smaller of
// the tokenizer's and the model's), and at most `context` positions in a prompt and completion.
struct ModelLimits {
  int64_t vocab = 0;
  int64_t context = 0;
};

struct Rules {
  rl::RolloutOptions rollout;  // G, max_tokens, sampling, system prompt, length reward, truncation
  bool normalize_std = true;   // advantages (R - mean) / (std + 1e-6), else R - mean
  int64_t async_level = 2;
  int64_t dataset_size = 0;       // generated tasks: infer.dataset_size; a dataset: its size
  bool partial_rollouts = false;  // C3PO++ files name each group's draw in its task_id
  bool proofs = true;             // every completion must carry a TOPLOC proof
  bool fp8 = false;  // the run rolls out in FP8 (rl.precision): recompute with FP8 linear layers

  // The numerical thresholds below come from [validator], or [validator.fp8] in an FP8 run.
  toploc::Thresholds thresholds;  // per chunk: [validator] toploc_* (docs/validation.md)
  // The mantissa error averaged over every chunk a file's checked completions have
  // (sample_checks.h: average_chunks) may not exceed this.
  double toploc_file_mant_err_mean = 1.2;
  toploc::ProofConfig proof;
  // Verifiable sampling: a sampled token's u may fall this far outside its interval of the
  // recomputed distribution (numerical noise between the worker's decode and our prefill).
  double sampling_tolerance = 0.1;
  int64_t max_sampling_misses = 0;  // tokens per completion allowed outside that tolerance
  double max_logprob_error = 0.05;  // mean |behaviour log-prob - recomputed| per completion
  // In an FP8 run, a file whose checked chunks' mean mantissa error against the policy computed
  // without FP8 is below this times their error in FP8 was not rolled out in FP8
  // (check_file_average); [validator.fp8] precision_ratio.
  double fp8_precision_ratio = 0.6;
  // > 0: a completion may end on a stop token only where p(stop) > this. Off by default: the
  // sampling check already places the stop token's u exactly, and a floor would reject honest
  // samples of an unlikely stop (see docs/validation.md).
  double eos_min_prob = 0;

  double sample_fraction = 0.25;  // of a file's completions checked by prefill
  int64_t min_samples = 4;        // ... at least this many (or all, when fewer)

  // What one file may cost a validator (docs/validation.md#limits): a file over these is
  // rejected. The verifier runs again on a random sample of at most max_reward_checks completions.
  double max_file_seconds = 100;   // 0 = no limit
  int64_t max_file_rows = 4096;    // rows
  int64_t max_reward_checks = 64;  // completions whose reward the verifier recomputes

  // From [rl] (rl.precision too), [env], [infer], [toploc] and [validator]; `dataset_size` is the
  // run's task source's (0 for generated tasks: infer.dataset_size applies). Error naming the key
  // for a bad value.
  static Rules from_config(const Config& config, int64_t dataset_size);
};

}  // namespace trellis::validator
