// Countdown: generated tasks are solvable according to an independent brute-force solver, the
// verifier agrees with an independent evaluator on random expressions, every reachable value's
// brute-force expression is accepted and nothing reaches an unreachable target, and adversarial
// answers (a number used twice, a number not given, huge or deep or garbage text) score 0.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>

#include "common/error.h"
#include "common/rng.h"
#include "env/environments/environments.h"
#include "env_test_util.h"

namespace trellis::env {
namespace {

// Exact rationals for the tests' own arithmetic (small values: no overflow at these sizes).
struct Q {
  int64_t num = 0;
  int64_t den = 1;
  static Q of(int64_t n, int64_t d) {
    if (d < 0) n = -n, d = -d;
    const int64_t g = std::gcd(n, d);
    return {n / g, d / g};
  }
  bool operator<(const Q& o) const { return num * o.den < o.num * den; }
  bool operator==(const Q& o) const { return num == o.num && den == o.den; }
};

// Every value reachable from each subset of `numbers` (bit mask), with an expression for it.
using Reach = std::vector<std::map<Q, std::string>>;
Reach brute_force(const std::vector<int64_t>& numbers) {
  const size_t n = numbers.size();
  Reach reach(size_t{1} << n);
  for (size_t i = 0; i < n; ++i)
    reach[size_t{1} << i][Q::of(numbers[i], 1)] = std::to_string(numbers[i]);
  for (size_t mask = 1; mask < reach.size(); ++mask) {
    for (size_t a = (mask - 1) & mask; a > 0; a = (a - 1) & mask) {
      const size_t b = mask ^ a;
      for (const auto& [x, ex] : reach[a]) {
        for (const auto& [y, ey] : reach[b]) {
          auto put = [&](Q v, char op) {
            reach[mask].try_emplace(v, "(" + ex + " " + op + " " + ey + ")");
          };
          put(Q::of(x.num * y.den + y.num * x.den, x.den * y.den), '+');
          put(Q::of(x.num * y.den - y.num * x.den, x.den * y.den), '-');
          put(Q::of(x.num * y.num, x.den * y.den), '*');
          if (y.num != 0) put(Q::of(x.num * y.den, x.den * y.num), '/');
        }
      }
    }
  }
  return reach;
}

std::map<Q, std::string> all_reachable(const Reach& reach) {
  std::map<Q, std::string> all;
  for (const auto& m : reach) all.insert(m.begin(), m.end());
  return all;
}

Task task_with(std::vector<int64_t> numbers, int64_t target) {
  Task t;
  t.env = "countdown";
  t.verification_info = {{"numbers", numbers}, {"target", target}};
  return t;
}

using test::tagged;

void expect_sane(const Score& s) {
  EXPECT_GE(s.reward, 0.0);
  EXPECT_LE(s.reward, 1.0);
  EXPECT_FALSE(s.reason.empty());
  EXPECT_EQ(s.reason.find('\n'), std::string::npos) << s.reason;
}

TEST(Countdown, GeneratedTasksAreSolvableAndTheirSolutionsScoreOne) {
  const auto env = make_countdown_environment();
  for (int d = kMinDifficulty; d <= kMaxDifficulty; ++d) {
    for (uint64_t seed = 0; seed < 30; ++seed) {
      const Task task = env->generate(seed, d);
      ASSERT_NO_THROW(env->validate(task, "generated"));
      ASSERT_TRUE(task.solution);
      const Score s = env->score(task, *task.solution);
      EXPECT_EQ(s.reward, 1.0) << task.prompt << " / " << *task.solution << ": " << s.reason;
      const auto numbers = task.verification_info["numbers"].get<std::vector<int64_t>>();
      const auto target = task.verification_info["target"].get<int64_t>();
      // Not trivial: the target is none of the numbers.
      EXPECT_EQ(std::count(numbers.begin(), numbers.end(), target), 0);
      if (numbers.size() <= 4) {
        // The brute force finds the target too, and its own expression is accepted.
        const auto all = all_reachable(brute_force(numbers));
        const auto it = all.find(Q::of(target, 1));
        ASSERT_NE(it, all.end()) << task.prompt;
        EXPECT_EQ(env->score(task, tagged(it->second)).reward, 1.0) << it->second;
      }
    }
  }
}

TEST(Countdown, AcceptsEveryBruteForceSolutionAndNothingReachesAnUnreachableTarget) {
  const auto env = make_countdown_environment();
  const std::vector<int64_t> numbers = {2, 3, 7, 11};
  const auto all = all_reachable(brute_force(numbers));
  int64_t unreachable = 1;
  while (all.count(Q::of(unreachable, 1))) ++unreachable;
  ASSERT_LT(unreachable, 1000);  // a sanity bound on the brute force itself

  int accepted = 0;
  for (const auto& [value, expression] : all) {
    if (value.den != 1) continue;
    const Score s = env->score(task_with(numbers, value.num), tagged(expression));
    EXPECT_EQ(s.reward, 1.0) << expression << " = " << value.num << ": " << s.reason;
    ++accepted;
    // The same expression against the unreachable target.
    EXPECT_EQ(env->score(task_with(numbers, unreachable), tagged(expression)).reward, 0.0);
  }
  EXPECT_GT(accepted, 100);
}

// A random expression over literals drawn (with repetition) from the numbers and a few others,
// with its value computed here, independently of the verifier.
struct RandomExpression {
  std::string text;
  std::vector<int64_t> literals;
  std::optional<Q> value;  // none on division by zero
};

RandomExpression random_expression(RandomStream& rng, const std::vector<int64_t>& pool) {
  struct Part {
    std::string text;
    std::optional<Q> value;
  };
  RandomExpression out;
  std::vector<Part> parts;
  const int leaves = static_cast<int>(rng.uniform_int(1, 5));
  for (int i = 0; i < leaves; ++i) {
    const int64_t x = pool[rng.uniform_int(0, static_cast<int64_t>(pool.size()) - 1)];
    out.literals.push_back(x);
    parts.push_back({std::to_string(x), Q::of(x, 1)});
  }
  static const char* kPlus[] = {"+", " + "};
  static const char* kMinus[] = {"-", " - ", " \xE2\x88\x92 "};
  static const char* kTimes[] = {"*", " * ", " x ", "\xC3\x97", " \\times "};
  static const char* kDivide[] = {"/", " / ", " \xC3\xB7 "};
  while (parts.size() > 1) {
    // Adjacent parts only, so the literals stay in text order.
    const auto i = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(parts.size()) - 2));
    const Part a = parts[i];
    const Part b = parts[i + 1];
    const int op = static_cast<int>(rng.uniform_int(0, 3));
    std::optional<Q> v;
    std::string symbol;
    if (a.value && b.value) {
      const Q x = *a.value, y = *b.value;
      if (op == 0) v = Q::of(x.num * y.den + y.num * x.den, x.den * y.den);
      if (op == 1) v = Q::of(x.num * y.den - y.num * x.den, x.den * y.den);
      if (op == 2) v = Q::of(x.num * y.num, x.den * y.den);
      if (op == 3 && y.num != 0) v = Q::of(x.num * y.den, x.den * y.num);
    }
    if (op == 0) symbol = kPlus[rng.uniform_int(0, 1)];
    if (op == 1) symbol = kMinus[rng.uniform_int(0, 2)];
    if (op == 2) symbol = kTimes[rng.uniform_int(0, 4)];
    if (op == 3) symbol = kDivide[rng.uniform_int(0, 2)];
    parts[i] = {"(" + a.text + symbol + b.text + ")", v};
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
  out.text = parts[0].text;
  out.value = parts[0].value;
  return out;
}

TEST(Countdown, AgreesWithAnIndependentEvaluatorOnRandomExpressions) {
  const auto env = make_countdown_environment();
  RandomStream rng(2024);
  int correct = 0, reused = 0, foreign = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::vector<int64_t> numbers = {1, 3, 3, 4, 6, 25};
    const std::vector<int64_t> pool = {1, 3, 4, 6, 25, 5, 0};  // 5 and 0 are not given
    const RandomExpression e = random_expression(rng, pool);
    std::map<int64_t, int> uses;
    bool multiset_ok = true;
    for (const auto x : e.literals) {
      const auto given = std::count(numbers.begin(), numbers.end(), x);
      if (++uses[x] > given) multiset_ok = false;
    }
    // Half the time the target is the expression's own value (when it is an integer).
    int64_t target = rng.uniform_int(1, 50);
    if (e.value && e.value->den == 1 && rng.bernoulli(0.5)) target = e.value->num;
    const bool expected = multiset_ok && e.value && *e.value == Q::of(target, 1);
    const Score s = env->score(task_with(numbers, target), tagged(e.text));
    expect_sane(s);
    EXPECT_EQ(s.reward, expected ? 1.0 : 0.0) << e.text << " target " << target << ": " << s.reason;
    correct += expected;
    reused += !multiset_ok;
    foreign += std::count(e.literals.begin(), e.literals.end(), 5) > 0;
  }
  // The random cases do exercise every branch.
  EXPECT_GT(correct, 200);
  EXPECT_GT(reused, 200);
  EXPECT_GT(foreign, 200);
}

TEST(Countdown, NamesAdversarialAnswers) {
  const auto env = make_countdown_environment();
  const Task t = task_with({2, 3, 3, 5, 7}, 10);
  auto check = [&](const std::string& completion, double reward, const std::string& reason) {
    const Score s = env->score(t, completion);
    expect_sane(s);
    EXPECT_EQ(s.reward, reward) << completion.substr(0, 80);
    EXPECT_NE(s.reason.find(reason), std::string::npos) << s.reason;
  };
  check(tagged("2 * 5"), 1, "equals the target 10");
  check(tagged("(7 + 3) = 10"), 1, "equals the target 10");
  check("I think <answer>5 + 5</answer>, no wait: <answer>7 + 3</answer>", 1, "target");
  check(tagged("5 + 5"), 0, "uses 5 twice");
  check(tagged("2 * (3 + 2)"), 0, "uses 2 twice");
  check(tagged("3 + 3 + 3 + 1"), 0, "uses 3 3 times but it is given 2 times");
  check(tagged("10"), 0, "uses 10 which is not given");
  check(tagged("9 + 1"), 0, "uses 9 which is not given");
  check(tagged("99999999999999999999999*9999999999999"), 0, "which is not given");
  check(tagged("5 / (3 - 3)"), 0, "division by zero");
  check(tagged("7 + 3 = 11"), 0, "claims 11");
  check(tagged("7 + 2 = 10"), 0, "equals 9, not 10");
  check(tagged("7 / 2"), 0, "equals 7/2, not 10");
  check(tagged("7 + 3 = ten"), 0, "malformed answer");
  check(tagged("-2 + 12"), 0, "unary '-' is not allowed");
  check(tagged("2(5)"), 0, "malformed expression");
  check(tagged("seven plus three"), 0, "malformed expression");
  check(tagged(""), 0, "empty expression");
  check("7 + 3", 0, "no <answer>");
  check("<answer>7 + 3", 0, "no <answer>");
  check("", 0, "no <answer>");
  check(tagged(std::string(40, '(') + "7+3" + std::string(40, ')')), 0, "nested deeper");
  check(tagged(std::string(100000, '(')), 0, "longer than");
  check(tagged(std::string(1 << 20, '7')), 0, "longer than");
  check(std::string(1 << 20, 'x') + tagged("7+3"), 1, "target");
  check(tagged("7 + \xff\xfe 3"), 0, "byte 0xff");
}

TEST(Countdown, IsDeterministicPerSeedAndVariesAcrossSeeds) {
  const auto env = make_countdown_environment();
  EXPECT_EQ(task_to_json(env->generate(42, 6)), task_to_json(env->generate(42, 6)));
  std::set<std::string> prompts;
  for (uint64_t seed = 0; seed < 20; ++seed) prompts.insert(env->generate(seed, 6).prompt);
  EXPECT_GE(prompts.size(), 19u);
}

TEST(Countdown, DifficultyGrowsTheNumbers) {
  const auto env = make_countdown_environment();
  auto stats = [&](int d) {
    size_t count = 0;
    int64_t largest = 0;
    for (uint64_t seed = 0; seed < 30; ++seed) {
      const auto numbers =
          env->generate(seed, d).verification_info["numbers"].get<std::vector<int64_t>>();
      count = std::max(count, numbers.size());
      largest = std::max(largest, *std::max_element(numbers.begin(), numbers.end()));
    }
    return std::pair(count, largest);
  };
  EXPECT_EQ(stats(1), std::pair(size_t{3}, int64_t{10}));
  const auto [count, largest] = stats(10);
  EXPECT_EQ(count, 6u);
  EXPECT_GT(largest, 50);
  EXPECT_THROW(env->generate(1, 0), Error);
  EXPECT_THROW(env->generate(1, 11), Error);
}

TEST(Countdown, ValidateNamesTheBadField) {
  const auto env = make_countdown_environment();
  auto error_of = [&](Json info) {
    return test::validation_error(*env, std::move(info), "data.jsonl:7");
  };
  EXPECT_EQ(error_of({{"numbers", {1, 2}}, {"target", 3}}), "");
  EXPECT_NE(error_of(Json::array()).find("data.jsonl:7"), std::string::npos);
  EXPECT_NE(error_of({{"target", 3}}).find("numbers"), std::string::npos);
  EXPECT_NE(error_of({{"numbers", "1 2"}, {"target", 3}}).find("numbers"), std::string::npos);
  EXPECT_NE(error_of({{"numbers", Json::array()}, {"target", 3}}).find("numbers"),
            std::string::npos);
  EXPECT_NE(error_of({{"numbers", {1, 2.5}}, {"target", 3}}).find("numbers"), std::string::npos);
  EXPECT_NE(error_of({{"numbers", {1, -2}}, {"target", 3}}).find("numbers"), std::string::npos);
  EXPECT_NE(error_of({{"numbers", {1, 2}}}).find("target"), std::string::npos);
  EXPECT_NE(error_of({{"numbers", {1, 2}}, {"target", "3"}}).find("target"), std::string::npos);
  EXPECT_NE(error_of({{"numbers", {1, 2}}, {"target", 18446744073709551615ull}}).find("target"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::env
