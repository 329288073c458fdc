// SFT: supervised fine-tuning on (prompt, completion) pairs, the warm start that gives a small
// model a non-zero success rate before RL (`trellis sft`).
//
// Examples come from a JSONL file (sft.data: {"prompt": text or chat messages, "completion":
// text}), visited in a fresh seeded shuffle each epoch, or from the [env] environment's tasks
// (generated, or env.tasks) with their reference `solution` as the completion. Prompts are rendered
// as `trellis rl` and `trellis eval` render them (encode_prompt); the completion's tokens end with
// the chat template's end-of-turn token (the tokenizer's EOS without a template), so the model
// learns to stop. The examples of step s are a pure function of (seed, s): a resumed run sees
// exactly the data an uninterrupted one would.
//
// The loss is the token-mean negative log-likelihood of the batch's completion tokens (prompt
// tokens are context only), computed over micro-batches packed first-fit-decreasing, each scaled so
// that the accumulated gradient equals that of the whole batch at once.
//
// run_sft() is the whole loop: AdamW with warm-up (optimizer.h), one console line and one
// metrics.jsonl row per step, greedy evaluation on held-out generated tasks, checkpoints that
// resume exactly, and the final model as a Hugging Face directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "env/environment.h"
#include "model/compute.h"
#include "model/prompting.h"
#include "model/transformer.h"
#include "rl/epoch_order.h"
#include "rl/metrics_log.h"
#include "rl/sequence_logprobs.h"
#include "rl/task_source.h"

namespace trellis::rl {

// One training example: its tokens and where it came from (for errors).
struct SftExample {
  std::string where;  // "file:line" or the task id
  Sequence sequence;  // prompt tokens; completion tokens ending with completion_end_id()
};

// The token that ends a completion: the chat template's end-of-turn token, else the tokenizer's
// first EOS. Error when the model has neither.
int32_t completion_end_id(const model::Prompting& prompting);

// `prompt` rendered by encode_prompt(); `completion` encoded as plain text (special-token spellings
// in it stay text) followed by completion_end_id().
SftExample make_example(const model::Prompting& prompting, const std::vector<env::Message>& prompt,
                        const std::string& completion, std::string where);

// A task's prompt (build_prompt with `system_prompt`, "" = the environment's own) and its reference
// solution. Error naming the task when it has no solution.
SftExample task_example(const model::Prompting& prompting, const env::Environment& environment,
                        const env::Task& task, const std::string& system_prompt);

// Every example of a JSONL file of {"prompt": text | [{"role", "content"}, ...], "completion":
// text} (blank lines skipped; a text prompt is one user message). Errors name "file:line".
std::vector<SftExample> load_sft_examples(const std::filesystem::path& path,
                                          const model::Prompting& prompting);

// The examples of each training step.
class SftData {
 public:
  // sft.data when set, else the tasks of `environment` ([env] tasks, difficulty, system_prompt).
  // `seed` orders them. Error when sft.data is empty or has a bad line, or when the environment's
  // tasks carry no solutions.
  SftData(const Config& config, const model::Prompting& prompting,
          const env::Environment& environment, uint64_t seed);
  ~SftData();

  // Examples [step * n, (step + 1) * n) of the stream: never repeated with generated tasks, epoch
  // after shuffled epoch with a file.
  std::vector<SftExample> batch(int64_t step, int64_t n);
  std::string describe() const;

 private:
  const model::Prompting& prompting_;
  const env::Environment& environment_;
  std::string system_prompt_;
  std::string path_;
  std::vector<SftExample> examples_;  // from sft.data; empty: from tasks_
  std::optional<EpochOrder> order_;   // of examples_
  std::unique_ptr<TaskSource> tasks_;
};

struct SftLoss {
  double loss = 0;                // token-mean NLL of the batch's completion tokens
  int64_t completion_tokens = 0;  // the tokens the loss averages over
  int64_t input_tokens = 0;       // tokens fed to the model (prompts included)
  int64_t micro_batches = 0;
};

// Forward and backward of one batch, accumulating gradients into the model's parameters (which
// must require grad). Examples are packed first-fit-decreasing into micro-batches of at most
// `micro_batch_tokens` input tokens; `vocab_limit` as in sequence_logprobs(). Error naming the
// example when one alone does not fit. `activation_checkpointing`:
// ForwardOptions::recompute_layers.
SftLoss sft_backward(model::Transformer& model, const std::vector<SftExample>& batch,
                     int64_t micro_batch_tokens, int64_t vocab_limit,
                     bool activation_checkpointing = false);

// Greedy (temperature 0) completions of `tasks`, one each, at most `max_tokens` new tokens, scored
// by the environment: "eval/reward" (mean task reward) and "eval/pass" (fraction scoring 1).
Metrics evaluate_greedy(model::Transformer& model, const model::Prompting& prompting,
                        const env::Environment& environment, const std::vector<env::Task>& tasks,
                        int64_t max_tokens, const std::string& system_prompt);

struct SftOptions {
  bool resume = false;  // continue from the newest checkpoint of the run directory
  // Receives each step's console line (default: stdout).
  std::function<void(const std::string& line)> on_line;
};

struct SftResult {
  std::filesystem::path run_dir;
  int64_t steps = 0;  // optimizer steps done, in all
  Metrics last;       // the last step's metrics
};

// The training run described by [sft], [trainer], [model], [env], [run] and rl.max_tokens, in the
// run directory of make_run_dir(config). Errors name the configuration key at fault; a fresh run
// refuses a run directory that already has checkpoints, and a resumed one needs one.
SftResult run_sft(const Config& config, const model::Compute& compute, const SftOptions& options);

}  // namespace trellis::rl
