// Top-k selection: agreement with a plain sort on random chunks full of ties, the tie rule (lower
// index first, +0 = -0), and the refusals (NaN/Inf with their position, too few values, k = 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "error_of.h"
#include "toploc/topk.h"
#include "toploc_test_util.h"

namespace trellis::toploc {
namespace {

// The definition, by sorting everything: magnitude descending, then index ascending.
std::vector<uint32_t> naive_top_k(const std::vector<uint16_t>& v, size_t k) {
  std::vector<uint32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    return std::abs(test::from_bf16(v[a])) > std::abs(test::from_bf16(v[b]));
  });
  idx.resize(k);
  return idx;
}

TEST(TopK, AgreesWithSortingOnRandomChunksWithManyTies) {
  std::mt19937_64 rng(11);
  const uint16_t few[] = {0x0000, 0x8000, 0x3F80, 0xBF80, 0x4000, 0xC000, 0x3F81, 0x0001};
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 600;
    const size_t k = 1 + rng() % n;
    std::vector<uint16_t> v(n);
    const bool tied = trial % 2 == 0;
    for (auto& x : v) {
      x = tied ? few[rng() % 8] : test::to_bf16(std::normal_distribution<float>()(rng));
    }
    const TopK got = top_k(v, k, "test");
    ASSERT_EQ(got.indices, naive_top_k(v, k)) << "trial " << trial;
    for (size_t i = 0; i < k; ++i) ASSERT_EQ(got.values[i], v[got.indices[i]]);
  }
}

TEST(TopK, TiesGoToTheLowerIndexAndSignedZerosTie) {
  // Five values of magnitude 2 (both signs): k = 3 takes the first three of them by index.
  const std::vector<uint16_t> v = {0x3F80, 0xC000, 0x4000, 0x0000, 0xC000, 0x4000, 0x4000};
  EXPECT_EQ(top_k(v, 3, "test").indices, (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(top_k(v, 6, "test").indices, (std::vector<uint32_t>{1, 2, 4, 5, 6, 0}));
  const std::vector<uint16_t> zeros = {0x8000, 0x0000, 0x8000, 0x0000};
  EXPECT_EQ(top_k(zeros, 2, "test").indices, (std::vector<uint32_t>{0, 1}));
  // Denormals order by magnitude too.
  const std::vector<uint16_t> tiny = {0x0001, 0x8002, 0x0000};
  EXPECT_EQ(top_k(tiny, 2, "test").indices, (std::vector<uint32_t>{1, 0}));
}

TEST(TopK, RefusesNonFiniteValuesNamingRowAndColumn) {
  std::vector<uint16_t> v(3 * 8, 0x3F80);
  v[2 * 8 + 5] = 0x7FC0;  // quiet NaN, row 2 column 5
  const std::string e = test::error_of([&] { top_k(v, 4, "chunk 7", 8, 64); });
  EXPECT_NE(e.find("NaN (0x7fc0) at row 66, column 5"), std::string::npos) << e;
  EXPECT_NE(e.find("(chunk 7)"), std::string::npos) << e;
  v[2 * 8 + 5] = 0xFF80;  // -Inf
  EXPECT_NE(test::error_of([&] { top_k(v, 4, "x"); }).find("-Inf at element 21"),
            std::string::npos);
  v[2 * 8 + 5] = 0x7F80;  // +Inf, even when it would not be among the top k of finite values
  EXPECT_NE(test::error_of([&] { top_k(v, 1, "x"); }).find("+Inf"), std::string::npos);
  v[2 * 8 + 5] = 0xFFFF;  // negative NaN whose bits are >= p
  EXPECT_NE(test::error_of([&] { top_k(v, 1, "x"); }).find("NaN (0xffff)"), std::string::npos);
}

TEST(TopK, RefusesTooFewValuesAndZeroK) {
  const std::vector<uint16_t> v(10, 0x3F80);
  EXPECT_NE(test::error_of([&] { top_k(v, 11, "x"); }).find("10 values, fewer than k = 11"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { top_k(v, 0, "x"); }).find("k >= 1"), std::string::npos);
  EXPECT_EQ(top_k(v, 10, "x").indices.size(), 10u);
}

TEST(TopK, HandlesAFullSizeChunkQuickly) {
  // 32 rows x 8192: the production shape. Largest-magnitude values planted at known places.
  std::vector<uint16_t> v = test::random_rows(32 * 8192, 5, 0.5f);
  for (uint32_t i = 0; i < 128; ++i) v[i * 2048 + 7] = test::to_bf16(100.0f + i);
  const TopK t = top_k(v, 128, "x");
  for (uint32_t i = 0; i < 128; ++i) EXPECT_EQ(t.indices[i], (127 - i) * 2048 + 7);
}

}  // namespace
}  // namespace trellis::toploc
