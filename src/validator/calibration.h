// Calibration of the validator's thresholds (specs/toploc.md §3.5, §6): honest workers generate
// rollouts with proofs under a matrix of settings that change the numerics but not the policy
// (completions decoding at once, torch threads, KV-cache layout, compute dtype, device); every
// completion is checked by check_sample against a validator's model on every device and dtype
// run, as `trellis validate` checks it: a CUDA worker's by a CPU validator and the reverse. The
// largest statistics honest workers reach, and the smallest ones dishonest workers (perturbed
// weights, fp8 weights, other weights) reach, bound where the thresholds may lie. The same runs
// time generation against validation on one machine. `trellis bench validate` prints the report;
// docs/validation.md records it.
//
// Not thread-safe: it sets torch's thread count while it runs (restored at the end).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "model/prompting.h"
#include "model/transformer.h"
#include "rollout/rollout_record.h"
#include "toploc/verify.h"
#include "validator/rules.h"

namespace trellis::validator {

// How the worker's KV cache and forwards are laid out.
enum class KvLayout {
  kPaged,    // the worker's default paged cache, room for every completion
  kTight,    // a cache that holds one whole completion: the newest are preempted and re-prefilled
  kChunked,  // max_batch_tokens = the longest prompt (with room for a length sentence) + 1: a
             // prompt admitted beside another group's decodes is prefilled in chunks across
             // forwards, but no forward feeds part of a prompt alone (docs/validation.md: the
             // bf16 LM head of such a forward, with no rows, crashes)
};
const char* kv_layout_name(KvLayout layout);  // "paged", "tight", "chunked"

// One honest worker's setting.
struct WorkerSetting {
  int64_t batch = 8;  // completions decoding at once (engine max_num_seqs; G is cut to it)
  int threads = 1;    // torch threads
  KvLayout layout = KvLayout::kPaged;
  torch::ScalarType dtype = torch::kFloat32;  // the worker's compute dtype
  bool fp8 = false;  // linear layers in FP8 (rl.precision fp8-rollout | fp8: model/fp8/)
  torch::Device device = torch::kCPU;
  model::Compute compute() const { return {device, dtype}; }
  // e.g. "b8 t2 tight bf16", "b8 t2 paged bf16 fp8", "b8 t1 paged bf16 cuda" (off the CPU)
  std::string describe() const;
};

// Honest rollouts of one setting as the rows a worker uploads, and what generating them took.
struct HonestRun {
  WorkerSetting setting;
  std::vector<rollout::RolloutRecord> rows;
  int64_t tokens = 0;        // completion tokens
  double seconds = 0;        // wall time of generate_rollouts (prefill, decode, proofs, scoring)
  int64_t preemptions = 0;   // engine preemptions (re-prefills)
  int64_t forwards = 0;      // engine forwards
  double proof_seconds = 0;  // proof threads' time: proving and taking rows in
};

// Generates `completions` honest completions (whole groups of rl.group_size, cut to the batch)
// of the environment of `config` with TOPLOC proofs, as `trellis infer` does: prompts by fixed
// data sampling, the worker's engine options with the setting's batch, layout and precision
// (whatever rl.precision says), proofs built from the engine's hidden rows. `model` must be in the
// setting's dtype.
HonestRun generate_honest(model::Transformer& model, const model::Prompting& prompting,
                          const Config& config, const WorkerSetting& setting, int64_t completions);

// check_sample over a set of rows against one model: the worst statistics, and how many rows
// each check objected to.
struct CheckSummary {
  int64_t completions = 0, tokens = 0, passed = 0;
  std::map<std::string, int64_t> failed;  // check name -> completions it objected to
  toploc::ChunkStats worst;  // each statistic's largest value over every chunk of every completion
  // Each statistic of a completion's worst chunk, at its smallest over the completions: against
  // dishonest weights, how close the closest completion came to passing.
  toploc::ChunkStats least;
  double max_sampling_distance = 0;
  int64_t max_sampling_misses = 0, min_sampling_misses = 0;
  double max_logprob_error = 0, min_logprob_error = 0;
  double min_stop_prob = -1;  // -1: no completion ended on a stop token
  // The file-wide TOPLOC average (average_chunks, Rules::toploc_file_mant_err_mean): over every
  // chunk of the set, and at its largest and smallest over consecutive groups of
  // Rules::min_samples completions (what a validator checks of a small file).
  double file_mant_err_mean = 0;
  double max_group_mant_err_mean = 0, min_group_mant_err_mean = 0;
  // Groups of Rules::min_samples completions that check_file_average rejects (as files), of how
  // many; in an FP8 run, each group's average without FP8 over its average in FP8 (the precision
  // check rejects below Rules::fp8_precision_ratio), at its smallest and largest.
  int64_t groups = 0, groups_rejected = 0;
  double min_group_fp8_ratio = -1, max_group_fp8_ratio = -1;  // -1: not an FP8 run
  double seconds = 0;          // wall time of check_samples (packed prefill and checks)
  double prefill_seconds = 0;  // wall time of the same prefills one completion at a time
  double packed_seconds = 0;   // ... packed into forwards of up to 4096 tokens, as the trainer
                               // scores (what a validator batching its samples would pay)
  std::string first_reason;    // of the first objection, for the report
};

// `per_forward` consecutive rows are checked together (check_samples: one packed forward), as a
// validator checks the subset it drew from one file (checked_per_file).
CheckSummary check_rows(const std::vector<rollout::RolloutRecord>& rows, const Rules& rules,
                        const std::vector<int32_t>& stops, int64_t vocab, model::Transformer& model,
                        size_t per_forward = 1);

// How many completions a validator checks of a file of `file_rows` rows: sample_fraction of
// them, at least min_samples, at most all (Validator::choose_rows).
size_t checked_per_file(const Rules& rules, int64_t file_rows);

// Largest honest statistics over several summaries (smallest stop probability).
struct HonestMaxima {
  toploc::ChunkStats worst;
  double max_sampling_distance = 0;
  int64_t max_sampling_misses = 0;
  double max_logprob_error = 0;
  double min_stop_prob = -1;
  double max_group_mant_err_mean = 0;  // the file-wide TOPLOC average of min_samples completions
  double min_group_fp8_ratio = -1;     // FP8 runs: the precision check's ratio (-1: none)
  void add(const CheckSummary& summary);
};

// The validator's [validator] thresholds.
struct SuggestedThresholds {
  toploc::Thresholds toploc;
  double sampling_tolerance = 0;
  int64_t max_sampling_misses = 0;
  double max_logprob_error = 0;
};

// The rule (docs/validation.md#calibration): each threshold is at least twice the honest maximum
// plus a little (TOPLOC: 2x + 2 mismatches, 2x + 1 for the mantissa errors; sampling tolerance
// and log-prob error: 2x rounded up to 1-2-5 steps, at least 0.001), and never below `floor`.
// max_sampling_misses stays the floor's: a tolerance above every honest distance leaves no
// honest token outside it.
SuggestedThresholds suggest_thresholds(const HonestMaxima& honest,
                                       const SuggestedThresholds& floor);

// The floor for what this calibration cannot run: the TOPLOC paper's strict 38 / 10 / 8, set
// across GPUs and large models; sampling tolerance 0.1 and log-prob error 0.05, the rule applied
// to the validator's attack suite, whose trained policy has the large logits that bf16 rounds
// coarsely (docs/validation.md#calibration); no sampling misses.
SuggestedThresholds unmeasured_floor();

// The default matrix, in each of `computes`: on a CPU b1 t1, b8 t1, b8 t2 and b64 t2 with the
// paged cache, b8 t2 tight, b16 t2 chunked; on a GPU the same with one thread (threads change a
// CPU's reduction order; on a GPU they only run the host's side). Every setting's linear layers
// in FP8 when `fp8`.
std::vector<WorkerSetting> calibration_matrix(const std::vector<model::Compute>& computes,
                                              bool fp8 = false);

// Dishonest weights (specs/toploc.md §7), changed in place. `relative` noise adds N(0, (relative
// x RMS of the tensor)^2) to every weight.
void add_relative_noise(model::Transformer& model, double relative, uint64_t seed);
// fp8 e4m3 weights, as a worker serving an fp8 copy would have: each tensor scaled so its largest
// |w| is 448, rounded to e4m3 (fp8_e4m3_round), scaled back.
void quantize_fp8_e4m3(model::Transformer& model);
// Rounds to the nearest float8 e4m3 value (3 mantissa bits, ties to even, subnormals below 2^-6
// in steps of 2^-9, saturating at ±448), returned in x's dtype.
torch::Tensor fp8_e4m3_round(const torch::Tensor& x);

// The whole calibration behind `trellis bench validate`.
struct CalibrationOptions {
  int64_t completions = 32;              // per setting (at least its batch)
  std::vector<WorkerSetting> settings;   // calibration_matrix() of the computes below
  std::vector<model::Compute> computes;  // every device and dtype run: a validator model in each
  model::Compute validator;              // the validator the dishonest weights are checked by
  double noise = 0.01;                   // dishonest: relative weight noise
  uint64_t seed = 1;                     // of the noise and of the other weights
};

// One row of the report: a setting's completions against one validator model.
struct CalibrationRow {
  WorkerSetting worker;
  model::Compute validator_compute;
  std::string validator;  // "honest", or the dishonest weights': "noise 1%", "fp8-e4m3", ...
  int64_t generated_tokens = 0;
  double generation_seconds = 0;
  int64_t preemptions = 0;
  double proof_seconds = 0;
  CheckSummary check;
  bool same_device() const { return worker.device == validator_compute.device; }
  bool same_compute() const { return worker.compute() == validator_compute; }
};

struct CalibrationReport {
  int64_t checked_per_file = 1;              // completions checked together in one packed forward
  std::vector<CalibrationRow> honest;        // validator on the worker's device, in its dtype
  std::vector<CalibrationRow> cross;         // on the worker's device, in another dtype
  std::vector<CalibrationRow> cross_device;  // on another device (a CUDA worker, a CPU validator)
  std::vector<CalibrationRow> dishonest;     // one setting's completions against other weights
  HonestMaxima maxima;                       // over `honest`
  HonestMaxima cross_maxima;                 // over `cross`
  HonestMaxima cross_device_maxima;          // over `cross_device`
};

// Runs every setting of options.settings (on its compute's model, loaded from `model_dir`) and
// checks its completions against the validator model of each of options.computes, under the rules
// of `config` (an FP8 run's rules when rl.precision says so: every setting must roll out in the
// run's precision). The completions of the b8 paged setting with the most threads in
// options.validator's compute (else the first in that compute, else the first) are also checked
// against dishonest weights: options.noise and 0.3 x that, fp8-e4m3, unrelated weights; and the
// same setting rolled out in the other precision (a worker that claims the run's FP8 but computes
// in bf16, or the reverse) is checked against the honest validator. Validation runs on the
// generating setting's threads. on_progress(what) before each piece.
CalibrationReport calibrate(const std::string& model_dir, const Config& config,
                            const CalibrationOptions& options,
                            const std::function<void(const std::string&)>& on_progress = {});

}  // namespace trellis::validator
