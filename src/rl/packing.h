// Packing: samples into micro-batches for the trainer (specs/rl.md §4).
//
// First-fit-decreasing: samples sorted by length (longest first, ties by index) each go into the
// first micro-batch with room, so a micro-batch of at most `capacity` tokens wastes little. The
// packed forward restarts positions per sample and confines attention to each sample, so packing
// changes speed, never the result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trellis::rl {

// Indices of `lengths` grouped into bins whose lengths sum to at most `capacity`; each bin lists
// its indices in increasing order and bins come in order of their first (longest) item. Error
// naming the sample when one alone exceeds the capacity.
std::vector<std::vector<size_t>> pack_first_fit_decreasing(const std::vector<int64_t>& lengths,
                                                           int64_t capacity);

}  // namespace trellis::rl
