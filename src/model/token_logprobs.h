// Log-probs and entropies of tempered softmaxes, straight from the LM head's logits: the
// trainer's per-token scores (rl/sequence_logprobs.h).
//
// Composed from ATen ops (a cast to fp32, the temperature, log_softmax, gather, exp, product and
// sum) they make about a dozen passes over fp32 copies of [rows, vocab] forward and backward, and
// autograd keeps several of those copies for the backward pass: with Qwen's 151,936-token
// vocabulary that is 2.4 MB a scored token per copy, most of a micro-batch's memory and, on a GPU,
// a good part of a training step's time that is not a matmul. Here one autograd node reads the
// logits in their own dtype once forward (an online softmax) and once backward (writing their
// gradient), and keeps nothing but them and two floats a row.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace trellis::model {

struct TokenLogprobs {
  torch::Tensor logp;     // fp32 [N]: log softmax(logits[r] * inv_temperature[r])[targets[r]]
  torch::Tensor entropy;  // fp32 [N]: the entropy of that softmax
};

// logits [N, V] (fp32 or bf16, as the LM head computed them); targets int64 [N]; inv_temperature
// fp32 [N] or [N, 1], each > 0. `vocab_limit` in (0, V) restricts the softmax to the ids below it
// (a tokenizer with fewer tokens than the model's padded vocabulary); the gradient of the columns
// past it is 0. Both outputs are differentiable with respect to the logits. On the CPU a target
// outside the softmax is an error; the CUDA kernel gives that row NaN (a device cannot throw).
// Runs on the CPU, on a GPU in a build with TRELLIS_CUDA_KERNELS (model/cuda/token_logprobs.h),
// and elsewhere as composed::token_logprobs.
TokenLogprobs token_logprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                             const torch::Tensor& inv_temperature, int64_t vocab_limit = 0);

namespace composed {
// The same from ATen ops (autograd does the backward): the reference the kernels are tested
// against, and the path of devices without a kernel.
TokenLogprobs token_logprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                             const torch::Tensor& inv_temperature, int64_t vocab_limit = 0);
}  // namespace composed

}  // namespace trellis::model
