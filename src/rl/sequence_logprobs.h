// Sequence log-probs: the trainer's view of completions. Several (prompt, completion) sequences
// are packed into one forward (positions restart per sequence, attention never crosses them), and
// each completion token gets log softmax(logits / T)[token] (specs/rl.md §1: the sampling
// temperature T of its rollout, no top-k/top-p truncation) and, when asked, the full-distribution
// entropy of that tempered softmax. Both are differentiable when autograd is on.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "model/token_logprobs.h"
#include "model/transformer.h"

namespace trellis::rl {

// One sequence: prompt tokens, then the completion tokens that are scored (and trained on).
struct Sequence {
  std::vector<int32_t> prompt;      // at least one token
  std::vector<int32_t> completion;  // at least one token
  double temperature = 1.0;         // > 0; greedy rollouts count as T = 1

  // Tokens fed to the model: prompt + completion minus its last token.
  int64_t input_length() const {
    return static_cast<int64_t>(prompt.size() + completion.size()) - 1;
  }
};

// The packed inputs of a group of sequences (see transformer.h, forward_packed).
struct PackedSequences {
  torch::Tensor tokens, positions;  // int64 [T]
  std::vector<int64_t> seq_lens;    // input_length() of each sequence
  torch::Tensor rows;               // int64 [N]: the rows whose logits score completion tokens
  torch::Tensor targets;            // int64 [N]: the completion tokens
  torch::Tensor inv_temperature;    // fp32 [N, 1]: 1 / T of each row's sequence
};

// Error naming the sequence unless every sequence has a prompt, a completion and T > 0.
PackedSequences pack_sequences(const std::vector<const Sequence*>& sequences);

// logp: fp32 [N], completion tokens of all sequences in order; entropy: fp32 [N], undefined
// unless asked for.
using model::TokenLogprobs;

// `vocab_limit` (> 0) restricts the softmax to ids below it, as the engine does when the
// tokenizer has fewer tokens than the model's (padded) vocabulary. `forward` sets fp8 and
// recompute_layers (its rows are the completion rows).
TokenLogprobs sequence_logprobs(model::Transformer& model, const PackedSequences& packed,
                                int64_t vocab_limit, bool with_entropy,
                                model::ForwardOptions forward = {});

}  // namespace trellis::rl
