// Verifiable sampling (specs/toploc.md §4): one uniform u per token, drawn from a counter-based
// generator keyed only by (sample seed, position), and inverse-CDF selection over the
// temperature / top-k / top-p distribution with tokens in id order. The same (seed, prompt) gives
// the same completion whatever else shares the batch, and a validator can regenerate u and check
// that it falls in the sampled token's interval.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trellis::engine {

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // keep the k most likely tokens; 0 = all
  double top_p = 1.0;        // keep the smallest most-likely set with mass >= top_p; 1 = all
};

// Error naming `where` unless temperature >= 0, top_k >= 0 and 0 < top_p <= 1.
void validate_sampling(const SamplingParams& params, const std::string& where);

// u in [0, 1) for the token at absolute sequence position `position` (prompt tokens included) of
// the completion with sample seed `seed`: Philox4x32-10 with key = seed and counter = (position,
// 0), the first two output words giving 53 random bits.
double sampling_uniform(uint64_t seed, int64_t position);

struct Sample {
  int32_t token = 0;
  // log softmax(logits / T)[token] over the whole row, no top-k/top-p truncation (the behaviour
  // log-prob of specs/rl.md §1); T = 1 when greedy.
  float logprob = 0;
};

// logits: one fp32 row of `vocab` entries (ids >= vocab are never sampled).
Sample sample_token(const float* logits, int64_t vocab, const SamplingParams& params, double u);

// The interval [lo, hi) of u that selects `token` under `params` (lo == hi when top-k / top-p
// exclude it). Greedy gives [0, 1) for the argmax and an empty interval otherwise.
struct Interval {
  double lo = 0, hi = 0;
};
Interval token_interval(const float* logits, int64_t vocab, const SamplingParams& params,
                        int32_t token);

// The n most likely tokens under softmax(logits / T) (T = 1 when greedy) with their log-probs,
// most likely first (OpenAI-style top logprobs).
std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t vocab,
                                                    double temperature, int64_t n);

}  // namespace trellis::engine
