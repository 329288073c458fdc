// Longest common subsequence (the partial credit of reverse_text and sort), checked against a
// naive full-table computation and known values.
#include "env/verifiers/lcs.h"

#include <gtest/gtest.h>

#include <string>

#include "common/rng.h"

namespace trellis::env {
namespace {

size_t lcs(std::string_view a, std::string_view b) {
  return lcs_length<char>(std::span(a.data(), a.size()), std::span(b.data(), b.size()));
}

// The textbook (|a|+1) x (|b|+1) table.
size_t naive_lcs(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> t(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      t[i][j] = a[i - 1] == b[j - 1] ? t[i - 1][j - 1] + 1 : std::max(t[i - 1][j], t[i][j - 1]);
    }
  }
  return t[a.size()][b.size()];
}

TEST(Lcs, KnownValues) {
  EXPECT_EQ(lcs("ABCBDAB", "BDCABA"), 4u);
  EXPECT_EQ(lcs("", "abc"), 0u);
  EXPECT_EQ(lcs("abc", ""), 0u);
  EXPECT_EQ(lcs("abc", "abc"), 3u);
  EXPECT_EQ(lcs("abc", "cba"), 1u);
  EXPECT_EQ(lcs("aaaa", "aa"), 2u);
}

TEST(Lcs, MatchesTheNaiveTableOnRandomStrings) {
  RandomStream rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::string a(rng.uniform_int(0, 12), ' ');
    std::string b(rng.uniform_int(0, 12), ' ');
    for (auto& c : a) c = static_cast<char>('a' + rng.uniform_int(0, 2));
    for (auto& c : b) c = static_cast<char>('a' + rng.uniform_int(0, 2));
    EXPECT_EQ(lcs(a, b), naive_lcs(a, b)) << a << " / " << b;
    EXPECT_EQ(lcs(a, b), lcs(b, a));
  }
}

TEST(Lcs, RatioIsOneOnlyForEqualSequences) {
  const std::vector<int> a = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(lcs_ratio<int>(a, a), 1.0);
  EXPECT_DOUBLE_EQ(lcs_ratio<int>(a, std::vector<int>{1, 2, 3}), 0.75);              // one missing
  EXPECT_DOUBLE_EQ(lcs_ratio<int>(a, std::vector<int>{1, 2, 3, 4, 9, 9}), 4.0 / 6);  // junk costs
  EXPECT_DOUBLE_EQ(lcs_ratio<int>(a, std::vector<int>{}), 0.0);
  EXPECT_DOUBLE_EQ(lcs_ratio<int>(std::vector<int>{}, std::vector<int>{}), 1.0);
}

}  // namespace
}  // namespace trellis::env
