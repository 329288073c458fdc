// The countdown environment (after Ring-1T and TinyZero): reach a target number from given
// numbers with +, -, *, / and parentheses, each number used at most once.
//
// The generator draws the numbers, then combines a random subset of them with random operations
// (keeping every intermediate a positive integer, as in the TV game) to get the target, so every
// task has a solution: that expression is the reference answer. The verifier parses the model's
// expression with a bounded parser, checks that its literals come from the numbers (as a
// multiset), evaluates it with exact rationals (so (7 / 2) * 4 is exactly 14) and compares the
// value with the target. The reward is binary.
#include <algorithm>
#include <map>
#include <optional>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/rng.h"
#include "env/answer_extraction.h"
#include "env/environments/environments.h"
#include "env/verifiers/expression.h"
#include "env/verifiers/ginac_lock.h"

namespace trellis::env {
namespace {

constexpr size_t kMaxAnswerBytes = 1000;
constexpr size_t kMaxNumbers = 20;
constexpr int64_t kMaxNumber = 1'000'000'000;
constexpr int64_t kMaxTarget = 1'000'000'000'000'000;

// Difficulty d: 3 + d/3 numbers (3 at d=1, 6 at d=9..10), each in [1, 10 d], and a target up to
// 100 (d <= 3) or 1000.
int number_count(int difficulty) { return 3 + difficulty / 3; }
int64_t largest_number(int difficulty) { return 10 * difficulty; }
int64_t largest_target(int difficulty) { return difficulty <= 3 ? 100 : 1000; }

// Long values (a product of many given numbers) are cut so the reason stays one short line.
std::string shortened(std::string text) {
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

// The digits without leading zeros ("007" -> "7", "0" -> "0").
std::string canonical_digits(const std::string& digits) {
  const auto first = digits.find_first_not_of('0');
  return first == std::string::npos ? "0" : digits.substr(first);
}

// The value of "[-]digits", or none for any other text.
std::optional<GiNaC::numeric> signed_integer(std::string_view text) {
  const bool negative = text.starts_with('-');
  if (negative) text.remove_prefix(1);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  const GiNaC::numeric value = integer_value(text);
  return negative ? -value : value;
}

struct Built {
  Expression expression;
  int64_t target = 0;
};

// Combines `count` of the numbers, chosen at random, with random operations whose results stay
// positive integers.
Built combine(RandomStream& rng, const std::vector<int64_t>& numbers, int count) {
  std::vector<int64_t> order(numbers.begin(), numbers.end());
  rng.shuffle(order.begin(), order.end());
  Built built;
  struct Item {
    int node;
    int64_t value;
  };
  std::vector<Item> items;
  for (int i = 0; i < count; ++i) {
    built.expression.nodes.push_back({0, -1, -1, std::to_string(order[i])});
    items.push_back({i, order[i]});
  }
  while (items.size() > 1) {
    const auto i = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(items.size()) - 1));
    auto j = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(items.size()) - 2));
    if (j >= i) ++j;
    Item a = items[i];
    Item b = items[j];
    if (a.value < b.value) std::swap(a, b);  // a >= b: a - b stays positive, a / b may be exact
    struct Option {
      char op;
      int64_t value;
    };
    std::vector<Option> options = {{'+', a.value + b.value}, {'*', a.value * b.value}};
    if (a.value != b.value) options.push_back({'-', a.value - b.value});
    if (b.value > 1 && a.value % b.value == 0) options.push_back({'/', a.value / b.value});
    const Option chosen = options[rng.uniform_int(0, static_cast<int64_t>(options.size()) - 1)];
    built.expression.nodes.push_back({chosen.op, a.node, b.node, {}});
    const Item combined{static_cast<int>(built.expression.nodes.size()) - 1, chosen.value};
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(std::max(i, j)));
    items[std::min(i, j)] = combined;
  }
  built.target = items.front().value;
  return built;
}

class CountdownEnvironment final : public Environment {
 public:
  std::string name() const override { return "countdown"; }

  std::string description() const override {
    return "reach a target from given numbers with + - * / (each number at most once); "
           "difficulty 1..10: 3..6 numbers up to 10*difficulty, targets up to 100 (d<=3) or 1000";
  }

  std::string system_prompt() const override {
    return "Think step by step, then give your final expression (only the expression, e.g. "
           "(1 + 2) * 3) inside <answer>...</answer>.";
  }

  Task generate(uint64_t seed, int difficulty) const override {
    std::lock_guard lock(ginac_mutex());
    check_difficulty(difficulty, "countdown.generate");
    // The difficulty picks the stream, so one seed gives unrelated tasks at each difficulty.
    RandomStream rng(seed, static_cast<uint32_t>(difficulty));
    const int n = number_count(difficulty);
    std::vector<int64_t> numbers(n);
    for (auto& x : numbers) x = rng.uniform_int(1, largest_number(difficulty));
    const int fewest = difficulty <= 3 ? 2 : n - 1;

    std::optional<Built> found;
    for (int attempt = 0; attempt < 200 && !found; ++attempt) {
      Built b = combine(rng, numbers, static_cast<int>(rng.uniform_int(fewest, n)));
      // A target that is one of the numbers would be solved by writing that number alone.
      const bool trivial = std::find(numbers.begin(), numbers.end(), b.target) != numbers.end();
      if (b.target >= 1 && b.target <= largest_target(difficulty) && !trivial) found = std::move(b);
    }
    if (!found) {
      // The sum of all numbers: larger than each of them (there are at least 3, all >= 1), and
      // within the target bound for every difficulty.
      Built sum;
      auto& nodes = sum.expression.nodes;
      int total = -1;
      for (int i = 0; i < n; ++i) {
        nodes.push_back({0, -1, -1, std::to_string(numbers[i])});
        const int leaf = static_cast<int>(nodes.size()) - 1;
        if (total >= 0) nodes.push_back({'+', total, leaf, {}});
        total = static_cast<int>(nodes.size()) - 1;
        sum.target += numbers[i];
      }
      found = std::move(sum);
    }

    Task task = generated_task(*this, seed, difficulty);
    task.prompt = fmt::format(
        "Using the numbers [{}], write an arithmetic expression that equals {}. You may use +, -, "
        "*, / and parentheses; each number may be used at most once, and you do not have to use "
        "all of them.",
        fmt::join(numbers, ", "), found->target);
    task.verification_info = {{"numbers", numbers}, {"target", found->target}};
    const std::string expression = format_expression(found->expression);
    task.solution =
        fmt::format("{} = {}\n<answer>{}</answer>", expression, found->target, expression);
    return task;
  }

  void validate(const Task& task, const std::string& where) const override {
    const Json& info = task.verification_info;
    if (!info.is_object()) fail(where, "verification_info must be an object");
    if (!info.contains("numbers") || !info["numbers"].is_array()) {
      fail(where, "verification_info.numbers must be an array of integers");
    }
    const Json& numbers = info["numbers"];
    if (numbers.empty() || numbers.size() > kMaxNumbers) {
      fail(where, "verification_info.numbers must hold 1 to {} numbers, not {}", kMaxNumbers,
           numbers.size());
    }
    for (const auto& x : numbers) {
      if (!json_integer_in(x, 1, kMaxNumber)) {
        fail(where, "verification_info.numbers must be integers in [1, {}], not {}", kMaxNumber,
             x.dump());
      }
    }
    if (!info.contains("target") || !json_integer_in(info["target"], -kMaxTarget, kMaxTarget)) {
      fail(where, "verification_info.target must be an integer of magnitude at most {}",
           kMaxTarget);
    }
  }

  Score score(const Task& task, std::string_view completion) const override {
    std::lock_guard lock(ginac_mutex());
    const auto answer = last_tagged(completion);
    if (!answer) return {0, "no <answer>...</answer> block"};
    if (answer->size() > kMaxAnswerBytes) {
      return {0, fmt::format("answer longer than {} bytes", kMaxAnswerBytes)};
    }
    const int64_t target = task.verification_info["target"].get<int64_t>();

    // "expression = target" is accepted; a different claimed value is a wrong answer.
    std::string_view text = *answer;
    if (const auto eq = text.find('='); eq != std::string_view::npos) {
      const std::string_view claim = trim(text.substr(eq + 1));
      const auto claimed = signed_integer(claim);
      if (!claimed) return {0, "malformed answer: '=' must be followed by the target"};
      if (*claimed != GiNaC::numeric(target)) {
        return {0, fmt::format("answer claims {}, not the target {}", shortened(std::string(claim)),
                               target)};
      }
      text = trim(text.substr(0, eq));
    }

    const ParsedExpression parsed = parse_expression(text);
    if (!parsed.expression) return {0, "malformed expression: " + parsed.error};

    std::map<std::string, int> available;
    for (const auto& x : task.verification_info["numbers"]) {
      ++available[std::to_string(x.get<int64_t>())];
    }
    std::map<std::string, int> used;
    for (const auto& literal : parsed.expression->literals()) {
      const std::string number = canonical_digits(literal);
      const int uses = ++used[number];
      const auto it = available.find(number);
      const int given = it == available.end() ? 0 : it->second;
      if (given == 0) return {0, fmt::format("uses {} which is not given", shortened(number))};
      if (uses > given) {
        return {0, given == 1 ? fmt::format("uses {} twice", number)
                              : fmt::format("uses {} {} times but it is given {} times", number,
                                            uses, given)};
      }
    }

    const EvaluatedExpression evaluated = evaluate_expression(*parsed.expression);
    if (!evaluated.value) return {0, evaluated.error};
    if (*evaluated.value == GiNaC::numeric(target)) {
      return {1, fmt::format("expression equals the target {}", target)};
    }
    return {0, fmt::format("expression equals {}, not {}", shortened(to_string(*evaluated.value)),
                           target)};
  }
};

}  // namespace

std::unique_ptr<Environment> make_countdown_environment() {
  return std::make_unique<CountdownEnvironment>();
}

}  // namespace trellis::env
