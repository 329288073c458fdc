// Fixed data sampling (specs/toploc.md §5): which prompts a worker must use for a submission is
// a pure function of (node address, step, submission number), so a validator can recompute the
// indices and a worker cannot cherry-pick easy prompts or repeat ones it already solved.
//
// seed = SHA-256(address ‖ ":" ‖ step ‖ ":" ‖ submission) with step and submission in decimal.
// Draw i (with replacement) is Philox4x32-10 at counter (i, 0, 0, 0) under the key made of the
// seed's first 8 bytes (little-endian words); its first two outputs form a 64-bit number x and
// the index is floor(x · n / 2^64) (a multiply-shift: no modulo bias worth naming for n < 2^32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trellis::rollout {

// `count` prompt indices in [0, dataset_size).
std::vector<int64_t> sample_prompt_indices(const std::string& node_address, int64_t step,
                                           int64_t submission, int64_t count, int64_t dataset_size);

}  // namespace trellis::rollout
