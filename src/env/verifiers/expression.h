// Arithmetic expressions over non-negative integer literals (+, -, *, /, parentheses): a bounded
// parser and an exact evaluator. The countdown verifier reads model output with it; the arithmetic
// generator uses it to compute (and validate() to check) the value of its expressions.
//
// Model output is untrusted, so parsing is bounded: the text's length, the nesting of parentheses
// (the parser recurses once per level) and nothing else grows. Evaluation is iterative and exact
// (GiNaC/CLN rationals), so a long chain cannot overflow the stack or an integer type.
//
// Accepted spellings: '*', 'x', 'X', '×', '·', "\times", "\cdot" multiply; '/', '÷', "\div"
// divide; '-', '−' (U+2212) subtract. Implicit multiplication ("2(3+4)") is an error.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ginac/numeric.h>
#include <ginac/operators.h>

namespace trellis::env {

struct ExpressionLimits {
  size_t max_length = 1000;  // bytes of text
  int max_depth = 32;        // nesting of parentheses
  bool allow_unary_minus = false;
};

// A parsed expression: nodes in an arena, every node after its children, the root last.
struct Expression {
  struct Node {
    char op = 0;  // 0: a literal; '+', '-', '*', '/'; 'n': negation (left only)
    int left = -1;
    int right = -1;
    std::string literal;  // the digits as written (op == 0)
  };
  std::vector<Node> nodes;

  // The literals in the order they appear in the text.
  std::vector<std::string> literals() const;
};

struct ParsedExpression {
  std::optional<Expression> expression;
  std::string error;  // why parsing failed, one line (when expression is empty)
};

ParsedExpression parse_expression(std::string_view text, const ExpressionLimits& limits = {});

struct EvaluatedExpression {
  std::optional<GiNaC::numeric> value;  // an exact rational
  std::string error;                    // "division by zero" (when value is empty)
};

EvaluatedExpression evaluate_expression(const Expression& expression);

// The expression as text: single spaces around binary operators and only the parentheses that
// precedence and order need ("(1 + 2) * 3", "8 - (2 - 1)"); parsing it gives the same value.
std::string format_expression(const Expression& expression);

// The value of a literal (a string of digits) as an exact integer.
GiNaC::numeric integer_value(std::string_view digits);

// `value` as text: "-12", "7/2".
std::string to_string(const GiNaC::numeric& value);

}  // namespace trellis::env
