// Engine: the rollout engine's core. Continuous batching over a paged KV cache, verifiable
// sampling, per-token behaviour log-probs and policy versions, weight updates with partial
// rollouts (C3PO++), and final hidden-state rows for TOPLOC proofs.
//
// The caller drives it: add() requests, call step() (one forward over the running batch) or
// run() (steps until a token budget is spent), update_weights() between steps. Each step admits
// waiting requests while the KV cache has room, prefills them (prompt chunks share the forward with
// the decodes), samples one token for every running completion and retires finished ones at once,
// so queued requests take their place on the next step. When the cache runs out, the newest
// completion is preempted and later resumes by re-prefilling prompt + prefix.
//
// Not thread-safe: one thread calls everything (EngineLoop wraps it in a thread for servers).
// Callbacks run on that thread, except the hidden-row sink, which runs on a worker of its own so
// that proof building stays off the decode hot path.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "engine/sampler.h"
#include "model/transformer.h"

namespace trellis::engine {

struct EngineOptions {
  int64_t max_num_seqs = 256;       // completions decoding at once (C3PO++'s Ω_infer)
  int64_t kv_cache_tokens = 0;      // KV cache capacity in tokens (all sequences together);
                                    // 0 = what kv_cache_mib holds, at most max_num_seqs x context
  int64_t kv_cache_mib = 4096;      // memory for the KV cache when kv_cache_tokens = 0
  int64_t max_batch_tokens = 4096;  // tokens per forward: decodes plus prefill chunks
  int64_t vocab_limit = 0;    // sample only ids below this (the tokenizer's size); 0 = model's
  int64_t max_retention = 0;  // C3PO++ σ: purge completions spanning more versions; 0 = never
  bool fp8 = false;           // the model's linear layers in FP8 (ForwardOptions::fp8)
  // Sample with engine/batch_sampler in tensor ops where the logits are (always so for a model
  // off the CPU, where it keeps the logits there); else row by row on the CPU. Same tokens.
  bool sample_in_tensor_ops = false;
  // Steps of decodes alone replay recorded device graphs where the model's device has them (CUDA;
  // engine/decode_graphs.h; not with fp8). false: every step runs op by op.
  bool decode_graphs = true;
};

struct Request {
  std::string id;  // unique among the requests in the engine
  std::vector<int32_t> prompt;
  int64_t n = 1;  // completions sharing one prefill; completion i samples with seed + i
  int64_t max_tokens = 256;
  std::vector<int32_t> stop_ids;  // sampling one of these ends the completion (it is kept)
  SamplingParams sampling;
  uint64_t seed = 0;
  int64_t top_logprobs = 0;    // alternatives recorded per token (0 = none, at most 20)
  bool hidden_states = false;  // deliver final hidden rows to the engine's hidden sink
};

enum class Finish { kNone, kStop, kLength, kAbort, kPurged };
const char* finish_name(Finish finish);  // "", "stop", "length", "abort", "purged"

struct Completion {
  std::string request_id;
  int64_t index = 0;  // 0 .. n-1
  uint64_t seed = 0;  // the sample seed (request seed + index)
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;    // behaviour log-prob of each token (sampler.h)
  std::vector<int64_t> versions;  // the policy version that sampled each token
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // when requested
  Finish finish = Finish::kNone;
};

// One sampled token, reported as soon as it exists (streaming).
struct TokenEvent {
  const Completion& completion;  // with the new token already appended
  int32_t token;
  float logprob;
};

// The final normed hidden state (the LM head's input) of the row whose input was completion token
// `token_index` (specs/toploc.md §1: rows for tokens 0 .. N-2 are committed). Each row is delivered
// once, from the forward that first fed the token, tagged with the version that computed it.
struct HiddenRow {
  std::string request_id;
  int64_t index = 0;
  int64_t token_index = 0;
  int64_t version = 0;
  torch::Tensor row;  // [hidden_size], compute dtype, owned copy
};

struct Callbacks {
  std::function<void(const TokenEvent&)> on_token;  // each sampled token
  std::function<void(Completion)> on_finish;        // each completion, once, when it ends
};

struct StepStats {
  int64_t prefill_tokens = 0;  // prompt/prefix tokens fed in this step
  int64_t decode_tokens = 0;   // completions that advanced by one token
  int64_t finished = 0;        // completions finished in this step
  double seconds = 0;
};

struct EngineStats {
  int64_t requests = 0, completions_finished = 0, tokens_generated = 0, prompt_tokens = 0;
  int64_t steps = 0, preemptions = 0, purged = 0;
  int64_t running = 0, waiting = 0, kv_blocks_used = 0, kv_blocks_total = 0;
  int64_t version = 0;
  int64_t decode_graphs = 0;  // device graphs recorded for decode steps (engine/decode_graphs.h)
  double busy_seconds = 0;
};

// C3PO++ iteration result: completions finished in the iteration; the rest stay in flight.
struct IterationResult {
  std::vector<Completion> finished;
  int64_t tokens = 0;  // tokens of the finished completions (what the budget counts)
  bool budget_reached = false;
};

class Engine {
 public:
  Engine(model::Transformer& model, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Error naming the field unless the request can run: non-empty prompt of valid ids, n >= 1,
  // max_tokens >= 1, prompt + max_tokens within the context and the KV cache, a fresh id.
  void add(Request request, Callbacks callbacks = {});
  // The checks of add() that need no engine state (everything but the id): thread-safe.
  void validate(const Request& request) const;
  // Ends the request's unfinished completions with Finish::kAbort (their on_finish fires).
  // Unknown or finished ids are ignored.
  void abort(const std::string& request_id);
  void abort_all();
  // Ends completion `index` of the request with Finish::kStop (its on_finish fires) and keeps its
  // siblings running: a server that finds a stop string in the text ends just that completion.
  // Unknown ids, indexes and finished completions are ignored.
  void stop(const std::string& request_id, int64_t index);

  StepStats step();
  bool has_work() const;

  // Steps until the completions finished during this call hold at least token_budget tokens
  // (C3PO++ Φ; 0 = until no work is left). Unfinished completions stay in flight for the next
  // iteration; finished ones are also reported through their callbacks.
  IterationResult run(int64_t token_budget = 0);

  // Pause point for a new policy: `load` replaces the model's weights (between steps, so nothing
  // is running), then the version becomes `version`. In-flight completions keep their tokens and
  // continue by re-prefilling prompt + prefix under the new weights; those that would span more
  // than max_retention versions are purged (on_finish with Finish::kPurged).
  void update_weights(const std::function<void(model::Transformer&)>& load, int64_t version);
  int64_t version() const;

  // Receives hidden rows on a worker thread (set before adding requests that ask for them).
  void set_hidden_sink(std::function<void(HiddenRow)> sink);
  // Blocks until every hidden row produced so far has been delivered.
  void flush_hidden();

  EngineStats stats() const;
  const EngineOptions& options() const;
  const model::Transformer& model() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trellis::engine
