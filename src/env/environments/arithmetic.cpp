// The arithmetic environment (after Ring-1T): compute the exact value of a multi-digit integer
// expression with +, - and *, and at higher difficulty parentheses.
//
// Values are exact big integers (GiNaC/CLN): at high difficulty a product of several 10-digit
// numbers is far beyond int64. The expected answer is stored as a decimal string, so datasets can
// hold any size. The answer is read tolerantly ("1,234", "1 234", "+17", "−5", "42.0"), compared
// exactly; the reward is binary.
#include "common/error.h"
#include "common/rng.h"
#include "env/answer_extraction.h"
#include "env/environments/environments.h"
#include "env/verifiers/expression.h"
#include "env/verifiers/ginac_lock.h"

namespace trellis::env {
namespace {

constexpr size_t kMaxAnswerBytes = 1000;
constexpr size_t kMaxExpressionBytes = 10000;

// Difficulty d: 2 + (d-1)/2 operands (2 at d=1, 6 at d=9..10) of up to d+1 digits; + and - only
// up to d=2, * from d=3, and a random parenthesized tree from d=5.
int operand_count(int difficulty) { return 2 + (difficulty - 1) / 2; }
int most_digits(int difficulty) { return difficulty + 1; }
bool uses_products(int difficulty) { return difficulty >= 3; }
bool uses_parentheses(int difficulty) { return difficulty >= 5; }

ExpressionLimits task_limits() {
  // Dataset expressions may be longer, deeper and negated; they are trusted to be bounded here.
  return {.max_length = kMaxExpressionBytes, .max_depth = 100, .allow_unary_minus = true};
}

// At most 60 printable ASCII characters, so a reason quoting the answer stays one safe line.
std::string shortened(std::string_view text) {
  std::string out;
  for (const char c : text.substr(0, 60)) out += c >= 0x20 && c < 0x7f ? c : '?';
  if (text.size() > 60) out.replace(57, 3, "...");
  return out;
}

// The canonical text of an integer answer ("-1234"), or none with the reason in `error`.
// Accepts a sign ('+', '-', '−'), digit groups of three separated by ',', '_', spaces or thin
// spaces ("1,234,567"), and a fraction of zeros ("42.0"); rejects anything else.
std::optional<std::string> canonical_integer(std::string_view text, std::string& error) {
  const std::string_view original = text;
  text = trim(text);
  bool negative = false;
  if (text.starts_with('+') || text.starts_with('-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  } else if (text.starts_with("\xE2\x88\x92")) {  // U+2212 minus sign
    negative = true;
    text.remove_prefix(3);
  }
  text = trim(text);
  if (const auto dot = text.find('.'); dot != std::string_view::npos) {
    const std::string_view fraction = text.substr(dot + 1);
    if (fraction.find_first_not_of('0') != std::string_view::npos) {
      error = fmt::format("answer '{}' is not an integer", shortened(original));
      return std::nullopt;
    }
    text = text.substr(0, dot);
  }
  std::vector<std::string> groups(1);
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      groups.back() += c;
      ++i;
      continue;
    }
    size_t separator = 0;
    if (c == ',' || c == '_' || c == ' ') separator = 1;
    if (text.substr(i).starts_with("\xE2\x80\x89") || text.substr(i).starts_with("\xE2\x80\xAF")) {
      separator = 3;  // U+2009 thin space, U+202F narrow no-break space
    }
    if (separator == 0) {
      error = fmt::format("answer '{}' is not an integer", shortened(original));
      return std::nullopt;
    }
    groups.emplace_back();
    i += separator;
  }
  // Separators must group thousands: "12,34" is a typo or a list, not 1234.
  bool grouped = !groups.front().empty() && groups.front().size() <= 3;
  for (size_t g = 1; g < groups.size(); ++g) grouped = grouped && groups[g].size() == 3;
  if (groups.size() > 1 && !grouped) {
    error = fmt::format("answer '{}' is not an integer (bad digit grouping)", shortened(original));
    return std::nullopt;
  }
  std::string digits;
  for (const auto& g : groups) digits += g;
  if (digits.empty()) {
    error = original.empty() ? "empty answer"
                             : fmt::format("answer '{}' has no digits", shortened(original));
    return std::nullopt;
  }
  const auto first = digits.find_first_not_of('0');
  if (first == std::string::npos) return "0";
  return (negative ? "-" : "") + digits.substr(first);
}

// Operands as digit strings: a nonzero leading digit, between half of and all `digits` digits.
std::string random_operand(RandomStream& rng, int digits) {
  const auto count = rng.uniform_int((digits + 1) / 2, digits);
  std::string s(1, static_cast<char>('0' + rng.uniform_int(1, 9)));
  for (int64_t i = 1; i < count; ++i) s += static_cast<char>('0' + rng.uniform_int(0, 9));
  return s;
}

char random_operator(RandomStream& rng, int difficulty) {
  static constexpr char kOperators[] = {'+', '-', '*'};
  return kOperators[rng.uniform_int(0, uses_products(difficulty) ? 2 : 1)];
}

// A random binary tree over operands [lo, hi), appended to `e`; returns the root's index.
int random_tree(RandomStream& rng, int difficulty, const std::vector<std::string>& operands, int lo,
                int hi, Expression& e) {
  if (hi - lo == 1) {
    e.nodes.push_back({0, -1, -1, operands[lo]});
  } else {
    const int split = static_cast<int>(rng.uniform_int(lo + 1, hi - 1));
    const char op = random_operator(rng, difficulty);
    const int left = random_tree(rng, difficulty, operands, lo, split, e);
    const int right = random_tree(rng, difficulty, operands, split, hi, e);
    e.nodes.push_back({op, left, right, {}});
  }
  return static_cast<int>(e.nodes.size()) - 1;
}

std::string random_expression(RandomStream& rng, int difficulty) {
  std::vector<std::string> operands(operand_count(difficulty));
  for (auto& o : operands) o = random_operand(rng, most_digits(difficulty));
  if (!uses_parentheses(difficulty)) {
    // A flat chain: "a - b * c" is evaluated with the usual precedence.
    std::string text = operands[0];
    for (size_t i = 1; i < operands.size(); ++i) {
      text += fmt::format(" {} {}", random_operator(rng, difficulty), operands[i]);
    }
    return text;
  }
  // A random tree printed with only the parentheses it needs; a few draws so that most tasks
  // at these difficulties do have parentheses.
  std::string text;
  for (int attempt = 0; attempt < 8; ++attempt) {
    Expression e;
    random_tree(rng, difficulty, operands, 0, static_cast<int>(operands.size()), e);
    text = format_expression(e);
    if (text.find('(') != std::string::npos) break;
  }
  return text;
}

// The exact value of a task's expression, or an Error naming `where`.
std::string expression_value(const std::string& expression, const std::string& where) {
  const ParsedExpression parsed = parse_expression(expression, task_limits());
  if (!parsed.expression) {
    fail(where, "verification_info.expression is not an expression: {}", parsed.error);
  }
  const EvaluatedExpression evaluated = evaluate_expression(*parsed.expression);
  if (!evaluated.value) fail(where, "verification_info.expression: {}", evaluated.error);
  if (!evaluated.value->is_integer()) {
    fail(where, "verification_info.expression has the non-integer value {}",
         to_string(*evaluated.value));
  }
  return to_string(*evaluated.value);
}

class ArithmeticEnvironment final : public Environment {
 public:
  std::string name() const override { return "arithmetic"; }

  std::string description() const override {
    return "exact value of a multi-digit integer expression; difficulty 1..10: 2..6 operands of "
           "up to 2..11 digits, + - only (d<=2), * from d=3, parentheses from d=5";
  }

  std::string system_prompt() const override {
    return "Think step by step, then give the exact integer result (e.g. -1234) inside "
           "<answer>...</answer>.";
  }

  Task generate(uint64_t seed, int difficulty) const override {
    std::lock_guard lock(ginac_mutex());
    check_difficulty(difficulty, "arithmetic.generate");
    // The difficulty picks the stream, so one seed gives unrelated tasks at each difficulty.
    RandomStream rng(seed, static_cast<uint32_t>(difficulty));
    const std::string expression = random_expression(rng, difficulty);
    const std::string value = expression_value(expression, "arithmetic.generate");
    Task task = generated_task(*this, seed, difficulty);
    task.prompt = fmt::format("Compute the exact value of: {}", expression);
    task.verification_info = {{"expression", expression}, {"answer", value}};
    task.solution = fmt::format("{} = {}\n<answer>{}</answer>", expression, value, value);
    return task;
  }

  void validate(const Task& task, const std::string& where) const override {
    std::lock_guard lock(ginac_mutex());
    const Json& info = task.verification_info;
    if (!info.is_object()) fail(where, "verification_info must be an object");
    const auto expression = json_required<std::string>(info, "expression", where);
    const auto answer = json_required<std::string>(info, "answer", where);
    std::string error;
    const auto expected = canonical_integer(answer, error);
    if (!expected) fail(where, "verification_info.answer: {}", error);
    const std::string value = expression_value(expression, where);
    if (value != *expected) {
      fail(where, "verification_info.answer {} is not the value {} of the expression",
           shortened(answer), shortened(value));
    }
  }

  Score score(const Task& task, std::string_view completion) const override {
    // Text only, no GiNaC: no lock, so scoring runs in parallel with other GiNaC users.
    const auto answer = last_tagged(completion);
    if (!answer) return {0, "no <answer>...</answer> block"};
    if (answer->size() > kMaxAnswerBytes) {
      return {0, fmt::format("answer longer than {} bytes", kMaxAnswerBytes)};
    }
    std::string error;
    const auto given = canonical_integer(*answer, error);
    if (!given) return {0, error};
    // validate() checked that the expected answer is an integer in this form.
    const auto expected =
        canonical_integer(task.verification_info["answer"].get<std::string>(), error);
    if (!expected) return {0, "the task's answer is not an integer"};
    if (*given == *expected) return {1, fmt::format("answer {} is correct", shortened(*given))};
    return {0, fmt::format("answer {} is not {}", shortened(*given), shortened(*expected))};
  }
};

}  // namespace

std::unique_ptr<Environment> make_arithmetic_environment() {
  return std::make_unique<ArithmeticEnvironment>();
}

}  // namespace trellis::env
