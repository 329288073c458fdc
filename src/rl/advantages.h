// Advantages: group-relative advantages (specs/rl.md §2) and online filtering (§4).
//
// For a group of G completions of one prompt with rewards R_1..R_G:
//   A_i = (R_i - mean(R)) / (std(R) + 1e-6)   (unbiased std; normalize_std = true)
//   A_i = R_i - mean(R)                        (Dr. GRPO; normalize_std = false)
// A group whose rewards are all equal (and any group of one) gets exactly zero advantages: it
// carries no signal and online filtering drops it.
#pragma once

#include <vector>

namespace trellis::rl {

std::vector<double> group_advantages(const std::vector<double>& rewards, bool normalize_std);

// True when some advantage is non-zero.
bool has_signal(const std::vector<double>& advantages);

}  // namespace trellis::rl
