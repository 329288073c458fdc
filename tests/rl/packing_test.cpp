// Packing tests: first-fit-decreasing on known inputs and, over random inputs, every sample
// exactly once with no bin over capacity and no more bins than a simple bound allows.
#include "rl/packing.h"

#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "error_of.h"

namespace trellis::rl {
namespace {

TEST(Packing, FirstFitDecreasingKnownCase) {
  // Sorted: 7(1) 5(0) 4(3) 3(2) 2(4) 1(5) into capacity 10:
  // 7 -> bin0; 5 -> bin1; 4 -> bin1 (9); 3 -> bin0 (10); 2 -> bin2; 1 -> bin1 (10).
  const auto bins = pack_first_fit_decreasing({5, 7, 3, 4, 2, 1}, 10);
  ASSERT_EQ(bins.size(), 3u);
  EXPECT_EQ(bins[0], (std::vector<size_t>{1, 2}));
  EXPECT_EQ(bins[1], (std::vector<size_t>{0, 3, 5}));
  EXPECT_EQ(bins[2], (std::vector<size_t>{4}));
}

TEST(Packing, RandomInputsPackEverySampleOnceWithinCapacity) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t capacity = std::uniform_int_distribution<int64_t>(8, 200)(rng);
    std::vector<int64_t> lengths(std::uniform_int_distribution<int>(0, 60)(rng));
    for (auto& l : lengths) l = std::uniform_int_distribution<int64_t>(1, capacity)(rng);
    const auto bins = pack_first_fit_decreasing(lengths, capacity);
    std::vector<int> seen(lengths.size(), 0);
    int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
    for (const auto& bin : bins) {
      int64_t sum = 0;
      for (size_t i : bin) {
        ++seen[i];
        sum += lengths[i];
      }
      EXPECT_LE(sum, capacity);
      EXPECT_TRUE(std::is_sorted(bin.begin(), bin.end()));
    }
    for (int s : seen) EXPECT_EQ(s, 1);
    // First fit never leaves two bins at most half full: bins <= 2 * total / capacity + 1.
    EXPECT_LE(static_cast<int64_t>(bins.size()), 2 * total / capacity + 1);
  }
}

TEST(Packing, OversizedSampleIsAnErrorNamingIt) {
  const auto message = test::error_of([] { pack_first_fit_decreasing({3, 12, 4}, 10); });
  EXPECT_NE(message.find("sample 1"), std::string::npos) << message;
  EXPECT_NE(message.find("trainer.micro_batch_tokens"), std::string::npos) << message;
}

}  // namespace
}  // namespace trellis::rl
