// Plain Python values (env/verifiers/python_values.h): canonical forms equal exactly when Python's
// == holds for the values, and malformed or hostile encodings are refused without harm.
#include "env/verifiers/python_values.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace trellis::env {
namespace {

std::string canonical(const std::string& encoded) {
  std::string error;
  const auto c = canonical_python_value(encoded, error);
  EXPECT_TRUE(c.has_value()) << encoded << ": " << error;
  return c.value_or("<malformed>");
}

std::string error_of(const std::string& encoded) {
  std::string error;
  const auto c = canonical_python_value(encoded, error);
  EXPECT_FALSE(c.has_value()) << encoded;
  return error;
}

TEST(PythonValues, EqualAsPythonSaysEqual) {
  const std::vector<std::pair<std::string, std::string>> equal = {
      {R"({"int": "3"})", R"({"float": "3.0"})"},
      {"true", R"({"int": "1"})"},
      {"false", R"({"float": "-0.0"})"},
      {R"({"int": "-0"})", R"({"int": "0"})"},
      {R"({"int": "1267650600228229401496703205376"})", R"({"float": "1.2676506002282294e+30"})"},
      {R"({"set": [{"int": "2"}, {"int": "1"}]})", R"({"set": [{"int": "1"}, {"float": "2.0"}]})"},
      {R"({"dict": [["a", {"int": "1"}], ["b", null]]})",
       R"({"dict": [["b", null], ["a", true]]})"},
      {R"({"tuple": [{"float": "0.1"}, "x"]})", R"({"tuple": [{"float": "0.1"}, "x"]})"},
  };
  for (const auto& [a, b] : equal) EXPECT_EQ(canonical(a), canonical(b)) << a << " vs " << b;
}

TEST(PythonValues, UnequalAsPythonSaysUnequal) {
  const std::vector<std::pair<std::string, std::string>> unequal = {
      {R"({"list": [{"int": "1"}]})", R"({"tuple": [{"int": "1"}]})"},
      {R"({"int": "1"})", R"("1")"},
      {R"({"int": "10000000000000000000001"})", R"({"float": "1e+22"})"},
      {R"({"float": "0.1"})", R"({"float": "0.30000000000000004"})"},
      {"null", "false"},
      {R"({"list": ["a,b"]})", R"({"list": ["a", "b"]})"},
      {R"({"dict": [["a", {"int": "1"}]]})", R"({"set": ["a"]})"},
  };
  for (const auto& [a, b] : unequal) EXPECT_NE(canonical(a), canonical(b)) << a << " vs " << b;
}

TEST(PythonValues, MalformedEncodingsAreRefused) {
  EXPECT_EQ(error_of("{\"int\": \"12a\"}"), "an int is not decimal digits");
  EXPECT_EQ(error_of("{\"float\": \"1.5 \"}"), "a float is not a number");
  EXPECT_EQ(error_of("{\"object\": []}"), "unknown type tag 'object'");
  EXPECT_EQ(error_of("{\"int\": 5}"), "a number is not given as text");
  EXPECT_EQ(error_of("{\"dict\": [[\"a\", 1, 2]]}"), "a dict entry is not a pair");
  EXPECT_EQ(error_of("{\"dict\": [[\"a\", null], [\"a\", true]]}"), "a dict repeats a key");
  EXPECT_EQ(error_of("5"), "a value of unknown form");
  EXPECT_EQ(error_of("{\"int\": \"1\"} {\"int\": \"2\"}"), "not JSON");
  EXPECT_EQ(error_of(""), "not JSON");
  // Deep nesting is refused before the (recursive) parser sees it.
  EXPECT_NE(error_of(std::string(1000000, '[')).find("nested more than"), std::string::npos);
  std::string deep;
  for (int i = 0; i < 130; ++i) deep += "{\"list\": [";
  deep += "null";
  for (int i = 0; i < 130; ++i) deep += "]}";
  EXPECT_NE(error_of(deep).find("nested more than"), std::string::npos);
}

}  // namespace
}  // namespace trellis::env
