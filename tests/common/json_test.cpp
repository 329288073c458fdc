// JSON helpers: integer range checks across nlohmann's signed/unsigned split, and the UTF-8-safe
// text round trip.
#include <gtest/gtest.h>

#include "common/json.h"
#include "error_of.h"

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

// Found by fuzz/json_fuzz.cpp: nlohmann reports 1e400 as out_of_range, not a parse error.
TEST(Json, NumberTooLargeForADoubleIsAnError) {
  const std::string msg = test::error_of([] { parse_json(R"({"a": [1e400]})", "body"); });
  EXPECT_NE(msg.find("too large"), std::string::npos) << msg;
  EXPECT_NE(msg.find("body"), std::string::npos) << msg;
}

// Found by fuzz/json_fuzz.cpp: json_text (nlohmann's dump) recurses once a level and overflowed
// the stack on 30,000 nested arrays.
TEST(Json, NestingDeeperThanTheLimitIsAnError) {
  const auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_NO_THROW(json_text(parse_json(nested(kMaxJsonDepth), "t")));
  const std::string msg = test::error_of([&] { parse_json(nested(30000), "body"); });
  EXPECT_NE(msg.find("nested deeper than 128 levels (body)"), std::string::npos) << msg;
  EXPECT_NE(test::error_of([&] { parse_json(nested(kMaxJsonDepth + 1), "t"); }), "");
}

// nlohmann converts any number to any integer type: floats out of range are undefined behaviour,
// integers wrap. json_required takes only what the type holds exactly.
TEST(Json, RequiredIntegersTakeOnlyNumbersTheTypeHolds) {
  const Json j = parse_json(R"({"huge": 1e300, "half": 1.5, "max_u64": 18446744073709551615,
      "whole": 4096.0, "neg": -3, "big32": 2147483648, "list": [1, 2, 1e20],
      "min64": -9223372036854775808, "two63": 9223372036854775808.0})",
                            "t");
  auto error = [&](auto tag, const char* key) {
    return test::error_of([&] { json_required<decltype(tag)>(j, key, "t.json"); });
  };
  EXPECT_NE(error(int64_t{}, "huge").find("field 'huge' = 1e+300 is not an integer in range"),
            std::string::npos);
  EXPECT_NE(error(int64_t{}, "half").find("not an integer"), std::string::npos);
  EXPECT_NE(error(int64_t{}, "max_u64").find("t.json"), std::string::npos);
  EXPECT_NE(error(int64_t{}, "two63").find("not an integer"), std::string::npos);
  EXPECT_NE(error(uint64_t{}, "neg").find("not an integer"), std::string::npos);
  EXPECT_NE(error(int32_t{}, "big32").find("not an integer"), std::string::npos);
  EXPECT_NE(error(std::vector<int>{}, "list").find("element 2"), std::string::npos);
  EXPECT_EQ(json_required<int64_t>(j, "whole", "t"), 4096);
  EXPECT_EQ(json_required<int64_t>(j, "min64", "t"), INT64_MIN);
  EXPECT_EQ(json_required<uint64_t>(j, "max_u64", "t"), UINT64_MAX);
  EXPECT_EQ(json_required<double>(j, "huge", "t"), 1e300);
  EXPECT_EQ(json_optional<int64_t>(j, "absent", 7, "t"), 7);
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
