// JSON helpers: integer range checks across nlohmann's signed/unsigned split, and the UTF-8-safe
// text round trip.
#include <gtest/gtest.h>

#include "common/json.h"

namespace trellis {
namespace {

TEST(Json, IntegerInRangeChecksSignedAndUnsignedAlike) {
  // Non-negative literals parse as unsigned, negative ones as signed.
  const Json j = parse_json(R"([0, 1, 5, -3, 18446744073709551615, 2.0, "4", true])", "t");
  EXPECT_FALSE(json_integer_in(j[0], 1, 10));  // unsigned 0 is below lo = 1
  EXPECT_TRUE(json_integer_in(j[0], 0, 10));
  EXPECT_TRUE(json_integer_in(j[1], 1, 10));
  EXPECT_TRUE(json_integer_in(j[2], -5, 5));
  EXPECT_FALSE(json_integer_in(j[2], -5, 4));
  EXPECT_TRUE(json_integer_in(j[3], -3, 0));
  EXPECT_FALSE(json_integer_in(j[3], -2, 0));
  EXPECT_FALSE(json_integer_in(j[2], -10, -1));  // a positive value against a negative range
  EXPECT_FALSE(json_integer_in(j[4], 0, INT64_MAX));
  for (int i : {5, 6, 7}) EXPECT_FALSE(json_integer_in(j[i], -10, 10)) << j[i].dump();
}

TEST(Json, SafeTextIsWhatJsonTextRecords) {
  const std::string bytes = "ok \xff\xfe end";
  const std::string safe = json_safe_text(bytes);
  EXPECT_NE(safe, bytes);
  EXPECT_EQ(json_safe_text(safe), safe);
  EXPECT_EQ(parse_json(json_text(Json(bytes)), "t").get<std::string>(), safe);
  EXPECT_EQ(json_safe_text("plain"), "plain");
}

}  // namespace
}  // namespace trellis
