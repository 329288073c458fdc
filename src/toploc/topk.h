// The top-k selection both sides of a TOPLOC proof agree on: the k entries of largest absolute
// value in a chunk of bf16 values, with ties broken by the lower index first.
//
// The order is defined on bit patterns alone: for finite bf16 values, |a| < |b| exactly when
// (a & 0x7FFF) < (b & 0x7FFF), so the selection needs no float arithmetic and gives the same
// answer on every machine and thread count (the reference leaves ties to torch.topk, whose choice
// among equal values is unspecified). +0 and -0 tie. NaN and ±Inf are refused with an Error: a
// hidden state that overflowed has nothing honest to commit to, and refusing is the one rule that
// cannot be gamed by choosing which non-finite pattern to write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace trellis::toploc {

struct TopK {
  std::vector<uint32_t> indices;  // positions in the chunk, largest magnitude first, ties by index
  std::vector<uint16_t> values;   // the bf16 bit patterns at those positions
};

// Error (naming `where`) if k = 0, if the chunk has fewer than k values, or if any value is NaN or
// infinite. `row_width` (the hidden size H; 0 for none) and `first_row` (the chunk's first row in
// its sequence) only let that error name the row and column at fault.
// O(n + 2^15) time: a histogram of magnitudes finds the k-th largest, one pass collects.
TopK top_k(std::span<const uint16_t> chunk, size_t k, const std::string& where,
           size_t row_width = 0, size_t first_row = 0);

inline bool bf16_is_finite(uint16_t bits) { return (bits & 0x7F80) != 0x7F80; }

}  // namespace trellis::toploc
