// Bounded expression parser and exact evaluator (see expression.h).
#include "env/verifiers/expression.h"

#include <sstream>

#include <fmt/format.h>

namespace trellis::env {
namespace {

struct Token {
  enum Kind { kNumber, kOperator, kOpen, kClose, kEnd } kind = kEnd;
  char op = 0;       // '+', '-', '*', '/' (kOperator)
  std::string text;  // digits (kNumber)
  size_t offset = 0;
};

// Operator spellings longer than one byte, and what they mean.
struct Spelling {
  std::string_view text;
  char op;
};
constexpr Spelling kSpellings[] = {
    {"\xC3\x97", '*'},      // × U+00D7
    {"\xC2\xB7", '*'},      // · U+00B7
    {"\\times", '*'},       // LaTeX
    {"\\cdot", '*'},        // LaTeX
    {"\xC3\xB7", '/'},      // ÷ U+00F7
    {"\\div", '/'},         // LaTeX
    {"\xE2\x88\x92", '-'},  // − U+2212
};

std::string describe_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x21 && u < 0x7f) return fmt::format("'{}'", c);
  return fmt::format("byte 0x{:02x}", u);
}

// Splits text into tokens; false (with error) on a character that is no part of an expression.
bool tokenize(std::string_view text, std::vector<Token>& tokens, std::string& error) {
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    if (c >= '0' && c <= '9') {
      const size_t start = i;
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
      tokens.push_back({Token::kNumber, 0, std::string(text.substr(start, i - start)), start});
      continue;
    }
    if (c == '(' || c == ')') {
      tokens.push_back({c == '(' ? Token::kOpen : Token::kClose, 0, {}, i});
      ++i;
      continue;
    }
    if (c == '+' || c == '-' || c == '*' || c == '/' || c == 'x' || c == 'X') {
      tokens.push_back({Token::kOperator, c == 'x' || c == 'X' ? '*' : c, {}, i});
      ++i;
      continue;
    }
    bool matched = false;
    for (const auto& s : kSpellings) {
      if (text.substr(i).starts_with(s.text)) {
        tokens.push_back({Token::kOperator, s.op, {}, i});
        i += s.text.size();
        matched = true;
        break;
      }
    }
    if (!matched) {
      error = fmt::format("unexpected {} at offset {}", describe_byte(c), i);
      return false;
    }
  }
  tokens.push_back({Token::kEnd, 0, {}, text.size()});
  return true;
}

// Recursive descent over the grammar
//   sum     := product (('+' | '-') product)*
//   product := unary (('*' | '/') unary)*
//   unary   := '-'* primary          (the minus signs only when allowed)
//   primary := number | '(' sum ')'
// Recursion happens only at '(' and is bounded by max_depth.
class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const ExpressionLimits& limits)
      : tokens_(tokens), limits_(limits) {}

  bool parse(Expression& out, std::string& error) {
    const int root = sum(0);
    if (root >= 0 && peek().kind != Token::kEnd) {
      fail_at(peek(), peek().kind == Token::kClose ? "unbalanced ')'" : "unexpected");
    }
    if (!error_.empty()) {
      error = error_;
      return false;
    }
    out = std::move(expression_);
    return true;
  }

 private:
  const Token& peek() const { return tokens_[position_]; }
  const Token& next() { return tokens_[position_++]; }

  int fail_at(const Token& t, std::string_view what) {
    if (!error_.empty()) return -1;
    if (t.kind == Token::kEnd) {
      error_ = tokens_.size() == 1 ? "empty expression" : "expression ends early";
    } else if (what == "unexpected") {
      const std::string shown = t.kind == Token::kNumber  ? t.text
                                : t.kind == Token::kOpen  ? "("
                                : t.kind == Token::kClose ? ")"
                                                          : std::string(1, t.op);
      error_ = fmt::format("unexpected '{}' at offset {}", shown, t.offset);
    } else {
      error_ = fmt::format("{} at offset {}", what, t.offset);
    }
    return -1;
  }

  int add(Expression::Node node) {
    expression_.nodes.push_back(std::move(node));
    return static_cast<int>(expression_.nodes.size()) - 1;
  }

  // operand (op operand)* for the operators in `ops`, left-associative.
  template <typename Operand>
  int left_chain(std::string_view ops, Operand operand) {
    int left = operand();
    while (left >= 0 && peek().kind == Token::kOperator &&
           ops.find(peek().op) != std::string_view::npos) {
      const char op = next().op;
      const int right = operand();
      if (right < 0) return -1;
      left = add({op, left, right, {}});
    }
    return left;
  }

  int sum(int depth) {
    return left_chain("+-", [&] { return product(depth); });
  }

  int product(int depth) {
    return left_chain("*/", [&] { return unary(depth); });
  }

  int unary(int depth) {
    // A loop, not recursion: "- - - - 1" must not deepen the stack.
    int negations = 0;
    while (limits_.allow_unary_minus && peek().kind == Token::kOperator && peek().op == '-') {
      next();
      ++negations;
    }
    int node = primary(depth);
    for (int i = 0; i < negations && node >= 0; ++i) node = add({'n', node, -1, {}});
    return node;
  }

  int primary(int depth) {
    const Token& t = peek();
    if (t.kind == Token::kNumber) {
      next();
      return add({0, -1, -1, t.text});
    }
    if (t.kind == Token::kOpen) {
      if (depth >= limits_.max_depth) {
        error_ = fmt::format("parentheses nested deeper than {}", limits_.max_depth);
        return -1;
      }
      next();
      const int inner = sum(depth + 1);
      if (inner < 0) return -1;
      if (peek().kind == Token::kEnd) {
        error_ = "unclosed '('";
        return -1;
      }
      if (peek().kind != Token::kClose) return fail_at(peek(), "unexpected");
      next();
      return inner;
    }
    if (t.kind == Token::kOperator && t.op == '-' && !limits_.allow_unary_minus) {
      return fail_at(t, "unary '-' is not allowed");
    }
    return fail_at(t, "unexpected");
  }

  const std::vector<Token>& tokens_;
  const ExpressionLimits& limits_;
  size_t position_ = 0;
  Expression expression_;
  std::string error_;
};

}  // namespace

std::vector<std::string> Expression::literals() const {
  // Literals are created left to right, so arena order is text order.
  std::vector<std::string> out;
  for (const auto& n : nodes) {
    if (n.op == 0) out.push_back(n.literal);
  }
  return out;
}

ParsedExpression parse_expression(std::string_view text, const ExpressionLimits& limits) {
  ParsedExpression result;
  if (text.size() > limits.max_length) {
    result.error = fmt::format("expression longer than {} bytes", limits.max_length);
    return result;
  }
  std::vector<Token> tokens;
  if (!tokenize(text, tokens, result.error)) return result;
  Expression expression;
  if (Parser(tokens, limits).parse(expression, result.error)) {
    result.expression = std::move(expression);
  }
  return result;
}

EvaluatedExpression evaluate_expression(const Expression& expression) {
  EvaluatedExpression result;
  if (expression.nodes.empty()) {
    result.error = "empty expression";
    return result;
  }
  // Children precede their parents in the arena, so one forward pass evaluates everything.
  std::vector<GiNaC::numeric> values(expression.nodes.size());
  for (size_t i = 0; i < expression.nodes.size(); ++i) {
    const auto& n = expression.nodes[i];
    switch (n.op) {
      case 0:
        values[i] = integer_value(n.literal);
        break;
      case 'n':
        values[i] = -values[n.left];
        break;
      case '+':
        values[i] = values[n.left] + values[n.right];
        break;
      case '-':
        values[i] = values[n.left] - values[n.right];
        break;
      case '*':
        values[i] = values[n.left] * values[n.right];
        break;
      case '/':
        if (values[n.right].is_zero()) {
          result.error = "division by zero";
          return result;
        }
        values[i] = values[n.left] / values[n.right];
        break;
      default:
        result.error = fmt::format("unknown operator '{}'", n.op);
        return result;
    }
  }
  result.value = values.back();
  return result;
}

std::string format_expression(const Expression& expression) {
  // Binding strength of what a node's text is: a sum binds loosest, a literal tightest.
  auto precedence = [](char op) {
    switch (op) {
      case '+':
      case '-':
        return 1;
      case '*':
      case '/':
        return 2;
      case 'n':
        return 3;
      default:
        return 4;
    }
  };
  std::vector<std::string> texts(expression.nodes.size());
  for (size_t i = 0; i < expression.nodes.size(); ++i) {
    const auto& n = expression.nodes[i];
    const int p = precedence(n.op);
    auto operand = [&](int child, bool right) {
      const int q = precedence(expression.nodes[child].op);
      // a - (b + c) and a / (b * c) need their parentheses; a + (b - c) and a * (b / c) do not.
      const bool wrap = q < p || (right && q == p && (n.op == '-' || n.op == '/'));
      return wrap ? "(" + texts[child] + ")" : texts[child];
    };
    if (n.op == 0) {
      texts[i] = n.literal;
    } else if (n.op == 'n') {
      texts[i] = "-" + operand(n.left, false);
    } else {
      texts[i] = operand(n.left, false) + " " + n.op + " " + operand(n.right, true);
    }
  }
  return texts.empty() ? std::string() : texts.back();
}

GiNaC::numeric integer_value(std::string_view digits) {
  // Nine digits at a time: exact for any length, and linear in the number of chunks.
  GiNaC::numeric value = 0;
  size_t i = 0;
  while (i < digits.size()) {
    const size_t n = std::min<size_t>(9, digits.size() - i);
    long chunk = 0;
    long scale = 1;
    for (size_t j = 0; j < n; ++j) {
      chunk = chunk * 10 + (digits[i + j] - '0');
      scale *= 10;
    }
    value = value * GiNaC::numeric(scale) + GiNaC::numeric(chunk);
    i += n;
  }
  return value;
}

std::string to_string(const GiNaC::numeric& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace trellis::env
