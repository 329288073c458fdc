// Longest common subsequence: the partial credit of reverse_text and sort. The ratio
// LCS(a, b) / max(|a|, |b|) is 1 only when a == b, and it charges both missing elements and extra
// ones (an answer padded with junk scores less than the same answer without it).
//
// The dynamic program costs O(|a| * |b|) time and O(min(|a|, |b|)) memory: callers bound the
// length of untrusted input before calling.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace trellis::env {

// The length of a longest common subsequence of `a` and `b` (elements compared with ==).
template <typename T>
size_t lcs_length(std::span<const T> a, std::span<const T> b) {
  if (a.size() < b.size()) std::swap(a, b);  // the row runs over the shorter sequence
  std::vector<size_t> row(b.size() + 1, 0);
  for (const T& x : a) {
    size_t diagonal = 0;  // row[j - 1] of the previous row
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = x == b[j - 1] ? diagonal + 1 : std::max(row[j], row[j - 1]);
      diagonal = above;
    }
  }
  return row[b.size()];
}

// LCS(a, b) / max(|a|, |b|), in [0, 1]; 1 when both are empty.
template <typename T>
double lcs_ratio(std::span<const T> a, std::span<const T> b) {
  const size_t longest = std::max(a.size(), b.size());
  return longest == 0 ? 1.0 : static_cast<double>(lcs_length(a, b)) / static_cast<double>(longest);
}

}  // namespace trellis::env
