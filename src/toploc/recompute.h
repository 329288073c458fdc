// What a validator recomputes to check a completion's proof (specs/toploc.md §3): one prefill of
// prompt + completion[0 .. N-2] with the claimed policy, keeping the final hidden rows of the
// positions P .. P+N-2 (those whose inputs are completion tokens 0 .. N-2), as bf16 bits. One
// forward replaces the N sequential decode steps that produced them.
#pragma once

#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace trellis::toploc {

// [N-1, H] bf16 bit patterns, row-major; empty when the completion has fewer than 2 tokens.
std::vector<uint16_t> committed_rows(model::Transformer& model, const std::vector<int32_t>& prompt,
                                     const std::vector<int32_t>& completion);

}  // namespace trellis::toploc
