// Fixed data sampling: the indices are a pure function of (address, step, submission), spread
// over the whole dataset, and match an independent recomputation of the documented recipe; the
// sampling seed is the documented hash; partial-rollout task_ids carry their draw.
#include "rollout/data_sampling.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <set>

#include "common/error.h"
#include "common/hashing.h"
#include "common/rng.h"

namespace trellis::rollout {
namespace {

const std::string kAddress(64, 'a');

TEST(DataSampling, SameInputsSameIndicesOtherInputsOtherIndices) {
  const auto a = sample_prompt_indices(kAddress, 3, 0, 16, 1000);
  EXPECT_EQ(a, sample_prompt_indices(kAddress, 3, 0, 16, 1000));
  EXPECT_NE(a, sample_prompt_indices(kAddress, 3, 1, 16, 1000));
  EXPECT_NE(a, sample_prompt_indices(kAddress, 4, 0, 16, 1000));
  EXPECT_NE(a, sample_prompt_indices(std::string(64, 'b'), 3, 0, 16, 1000));
  // A prefix of a longer draw: the count does not change earlier indices.
  const auto longer = sample_prompt_indices(kAddress, 3, 0, 20, 1000);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), longer.begin()));
}

TEST(DataSampling, MatchesTheDocumentedRecipe) {
  // Recomputed here by another route: hex SHA-256 decoded back to bytes, the key words built
  // byte by byte, and the index by floating-point scaling (exact enough for n = 7).
  const std::string seed = from_hex(sha256_hex(kAddress + ":12:3"), "test");
  PhiloxKey key{};
  for (int w = 0; w < 2; ++w)
    for (int b = 0; b < 4; ++b)
      key[w] |= static_cast<uint32_t>(static_cast<unsigned char>(seed[4 * w + b])) << (8 * b);
  const auto got = sample_prompt_indices(kAddress, 12, 3, 50, 7);
  for (uint32_t i = 0; i < 50; ++i) {
    const auto r = philox4x32({i, 0, 0, 0}, key);
    const double u = (static_cast<double>(r[0]) * 4294967296.0 + r[1]) / 18446744073709551616.0;
    EXPECT_EQ(got[i], static_cast<int64_t>(u * 7)) << "draw " << i;
  }
}

TEST(DataSampling, CoversTheDatasetWithReplacement) {
  const auto idx = sample_prompt_indices(kAddress, 0, 0, 4000, 10);
  std::vector<int> counts(10);
  for (int64_t i : idx) {
    ASSERT_GE(i, 0);
    ASSERT_LT(i, 10);
    ++counts[i];
  }
  for (int c : counts) EXPECT_NEAR(c, 400, 80);  // ~5 sigma
  const auto small = sample_prompt_indices(kAddress, 0, 0, 30, 3);
  EXPECT_LT(std::set<int64_t>(small.begin(), small.end()).size(), small.size());  // repeats
}

TEST(DataSampling, EmptyDatasetIsAnError) {
  EXPECT_THROW(sample_prompt_indices(kAddress, 0, 0, 1, 0), Error);
}

// One place of a draw, in constant time: the same index as the whole draw's.
TEST(DataSampling, OnePlaceOfADrawIsThatPlaceOfTheWholeDraw) {
  const auto all = sample_prompt_indices(kAddress, 4, 2, 40, 1000);
  for (int64_t i = 0; i < 40; ++i)
    EXPECT_EQ(sample_prompt_index(kAddress, 4, 2, i, 1000), all[static_cast<size_t>(i)]) << i;
  EXPECT_GE(sample_prompt_index(kAddress, 4, 2, std::numeric_limits<int64_t>::max(), 1000), 0);
  EXPECT_THROW(sample_prompt_index(kAddress, 4, 2, -1, 1000), Error);
  EXPECT_THROW(sample_prompt_index(kAddress, 4, 2, 0, 0), Error);
}

// Counts come from untrusted files (a group's place in its draw): a negative or absurd one is an
// Error naming the draw, never std::length_error or an allocation of the whole address space.
TEST(DataSampling, ACountOutsideItsRangeIsAnError) {
  EXPECT_TRUE(sample_prompt_indices(kAddress, 0, 0, 0, 10).empty());
  for (const int64_t count : {int64_t{-1}, int64_t{-2}, std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max(), int64_t{1} << 40}) {
    EXPECT_THROW(sample_prompt_indices(kAddress, 0, 0, count, 10), Error) << count;
  }
}

// Python: int.from_bytes(hashlib.sha256(b"c"*64 + b":12:3:sampling").digest()[:8], "little") >> 1
TEST(DataSampling, SamplingSeedIsTheDocumentedHash) {
  EXPECT_EQ(sampling_seed(std::string(64, 'c'), 12, 3), 1006325628405224674u);
  EXPECT_NE(sampling_seed(std::string(64, 'c'), 12, 4), sampling_seed(std::string(64, 'c'), 12, 3));
}

TEST(DataSampling, DrawnTaskIdsRoundTripAndPlainIdsHaveNoDraw) {
  const DrawCoordinates draw{12, 3, 5};
  const std::string id = drawn_task_id("reverse_text-d1-00ff", draw);
  EXPECT_EQ(id, "reverse_text-d1-00ff@12:3:5");
  const auto parsed = parse_drawn_task_id(id);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->first, "reverse_text-d1-00ff");
  EXPECT_EQ(parsed->second, draw);
  // A dataset's own '@' stays part of the id; only a trailing draw is split off.
  const auto nested = parse_drawn_task_id(drawn_task_id("user@example", draw));
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->first, "user@example");
  for (const char* plain : {"reverse_text-d1-00ff", "user@example", "a@1:2", "a@1:2:3:4",
                            "a@1:-2:3", "a@1:2:x", "a@:2:3", "a@1:2:3 ", "a@+1:2:3"}) {
    EXPECT_FALSE(parse_drawn_task_id(plain)) << plain;
  }
}

// Draw coordinates come from an untrusted worker: each must fit the file's int32 columns (step,
// submission, group place), or the task_id names no draw.
TEST(DataSampling, DrawCoordinatesBeyondInt32NameNoDraw) {
  const auto max = parse_drawn_task_id("t@2147483647:2147483647:2147483647");
  ASSERT_TRUE(max);
  EXPECT_EQ(max->second, (DrawCoordinates{2147483647, 2147483647, 2147483647}));
  for (const char* hostile :
       {"t@2147483648:0:0", "t@0:2147483648:0", "t@0:0:2147483648", "t@0:0:9223372036854775807",
        "t@0:0:99999999999999999999", "t@4611686018427387904:0:0"}) {
    EXPECT_FALSE(parse_drawn_task_id(hostile)) << hostile;
  }
}

}  // namespace
}  // namespace trellis::rollout
