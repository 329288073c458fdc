// Verifiable sampling of a whole batch in tensor ops, for logits that live on an accelerator: the
// rule of engine/sampler.h (one u per row; softmax(x / T) weights; top-k, then top-p, ranked by
// weight with ties to the lower id; inverse CDF over the kept ids in id order) in a few kernels on
// the logits' device, so that only the sampled ids and log-probs leave it.
//
// Row by row it picks what sample_token picks, up to the order of floating-point summation: the
// cumulative weights here are a scan on the device, there a sequential sum, so the two can
// disagree only when u lies within a few ulps (of double precision) of an interval's edge. A
// validator checks either against token_interval with the same tolerance as any cross-device
// difference in the logits.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "engine/sampler.h"

namespace trellis::engine {

// logits: fp32 [rows, vocab] on any device (ids >= vocab are never sampled: pass a narrowed
// view); params and u: one per row. One Sample per row; errors as sample_token's, naming the row.
std::vector<Sample> sample_batch(const torch::Tensor& logits,
                                 const std::vector<SamplingParams>& params,
                                 const std::vector<double>& u);

}  // namespace trellis::engine
