// The bounded expression parser and exact evaluator shared by countdown and arithmetic: known
// values, precedence, every accepted spelling, the bounds on hostile input, and that formatting
// round-trips.
#include "env/verifiers/expression.h"

#include <gtest/gtest.h>

#include "common/rng.h"

namespace trellis::env {
namespace {

// The value of `text` as "p/q" text, or "error: ..." when parsing or evaluation fails.
std::string value_of(std::string_view text, const ExpressionLimits& limits = {}) {
  const auto parsed = parse_expression(text, limits);
  if (!parsed.expression) return "error: " + parsed.error;
  const auto evaluated = evaluate_expression(*parsed.expression);
  if (!evaluated.value) return "error: " + evaluated.error;
  return to_string(*evaluated.value);
}

TEST(Expression, EvaluatesWithPrecedenceAndLeftAssociativity) {
  EXPECT_EQ(value_of("1 + 2 * 3"), "7");
  EXPECT_EQ(value_of("(1 + 2) * 3"), "9");
  EXPECT_EQ(value_of("8 - 2 - 1"), "5");
  EXPECT_EQ(value_of("8 / 4 / 2"), "1");
  EXPECT_EQ(value_of("7/2"), "7/2");
  EXPECT_EQ(value_of("6 / (1 - 3 / 4)"), "24");
  EXPECT_EQ(value_of("  ((42))  "), "42");
  EXPECT_EQ(value_of("007 + 1"), "8");
}

TEST(Expression, AcceptsCommonSpellingsOfOperators) {
  EXPECT_EQ(value_of("2 \xC3\x97 3 \xC3\xB7 4"), "3/2");  // × ÷
  EXPECT_EQ(value_of("2x3X4"), "24");
  EXPECT_EQ(value_of("2 \\times 3 \\div 4 \\cdot 2"), "3");
  EXPECT_EQ(value_of("9 \xE2\x88\x92 4"), "5");  // U+2212
  EXPECT_EQ(value_of("2 \xC2\xB7 5"), "10");     // middle dot
}

TEST(Expression, ComputesHugeValuesExactly) {
  EXPECT_EQ(value_of("99999999999999999999999*9999999999999"),
            "999999999999899999999990000000000001");
  EXPECT_EQ(value_of("123456789012345678901234567890 - 123456789012345678901234567889"), "1");
}

TEST(Expression, RejectsMalformedText) {
  EXPECT_EQ(value_of(""), "error: empty expression");
  EXPECT_EQ(value_of("   "), "error: empty expression");
  EXPECT_EQ(value_of("1 +"), "error: expression ends early");
  EXPECT_EQ(value_of("(1 + 2"), "error: unclosed '('");
  EXPECT_EQ(value_of("1 + 2)"), "error: unbalanced ')' at offset 5");
  EXPECT_EQ(value_of("2(3)"), "error: unexpected '(' at offset 1");
  EXPECT_EQ(value_of("1 + a"), "error: unexpected 'a' at offset 4");
  EXPECT_EQ(value_of("1.5"), "error: unexpected '.' at offset 1");
  EXPECT_EQ(value_of("1 \xff"), "error: unexpected byte 0xff at offset 2");
  EXPECT_EQ(value_of("1 * * 2"), "error: unexpected '*' at offset 4");
  EXPECT_EQ(value_of("5 / (3 - 3)"), "error: division by zero");
}

TEST(Expression, UnaryMinusOnlyWhenAllowed) {
  EXPECT_EQ(value_of("-1 + 3"), "error: unary '-' is not allowed at offset 0");
  const ExpressionLimits negatable{.allow_unary_minus = true};
  EXPECT_EQ(value_of("-1 + 3", negatable), "2");
  EXPECT_EQ(value_of("- - 4 * -(2)", negatable), "-8");
  // A long run of minus signs is a loop, not recursion.
  EXPECT_EQ(value_of(std::string(900, '-') + "1", negatable), "1");
}

TEST(Expression, BoundsDepthAndLength) {
  auto nested = [](int depth) { return std::string(depth, '(') + "1" + std::string(depth, ')'); };
  EXPECT_EQ(value_of(nested(32)), "1");
  EXPECT_EQ(value_of(nested(33)), "error: parentheses nested deeper than 32");
  EXPECT_EQ(value_of(std::string(1001, '(')), "error: expression longer than 1000 bytes");
  EXPECT_EQ(value_of(std::string(900, '(')), "error: parentheses nested deeper than 32");
  // Huge depth with a raised length bound: still refused by depth, without deep recursion.
  EXPECT_EQ(value_of(nested(100000), {.max_length = 1 << 20}),
            "error: parentheses nested deeper than 32");
  // A long chain is a deep tree; evaluation is iterative, so it is fine.
  std::string chain = "1";
  for (int i = 0; i < 20000; ++i) chain += "+1";
  EXPECT_EQ(value_of(chain, {.max_length = 1 << 20}), "20001");
}

TEST(Expression, ListsLiteralsInTextOrder) {
  const auto parsed = parse_expression("(25 - 3) * 07 / 3");
  ASSERT_TRUE(parsed.expression);
  EXPECT_EQ(parsed.expression->literals(), (std::vector<std::string>{"25", "3", "07", "3"}));
}

TEST(Expression, FormatsWithOnlyNeededParentheses) {
  auto formatted = [](std::string_view text) {
    const auto parsed = parse_expression(text, {.allow_unary_minus = true});
    return parsed.expression ? format_expression(*parsed.expression) : "error: " + parsed.error;
  };
  EXPECT_EQ(formatted("((1+2))*3"), "(1 + 2) * 3");
  EXPECT_EQ(formatted("1+(2*3)"), "1 + 2 * 3");
  EXPECT_EQ(formatted("8-(2-1)"), "8 - (2 - 1)");
  EXPECT_EQ(formatted("(8-2)-1"), "8 - 2 - 1");
  EXPECT_EQ(formatted("8/(4/2)"), "8 / (4 / 2)");
  EXPECT_EQ(formatted("8*(4/2)"), "8 * 4 / 2");
  EXPECT_EQ(formatted("1+(2-3)"), "1 + 2 - 3");
  EXPECT_EQ(formatted("-(1+2)"), "-(1 + 2)");
}

TEST(Expression, FormattedRandomTreesKeepTheirValue) {
  // Random trees built directly (not parsed), formatted, parsed back: the value must not change.
  RandomStream rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    Expression e;
    std::vector<int> roots;
    const int leaves = static_cast<int>(rng.uniform_int(1, 7));
    for (int i = 0; i < leaves; ++i) {
      e.nodes.push_back({0, -1, -1, std::to_string(rng.uniform_int(1, 20))});
      roots.push_back(static_cast<int>(e.nodes.size()) - 1);
    }
    while (roots.size() > 1) {
      const auto i =
          static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(roots.size()) - 2));
      e.nodes.push_back({"+-*/" [rng.uniform_int(0, 3)], roots[i], roots[i + 1], {}});
      roots[i] = static_cast<int>(e.nodes.size()) - 1;
      roots.erase(roots.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
    const auto direct = evaluate_expression(e);
    const std::string text = format_expression(e);
    const std::string expected = direct.value ? to_string(*direct.value) : "error: " + direct.error;
    EXPECT_EQ(value_of(text), expected) << text;
  }
}

}  // namespace
}  // namespace trellis::env
