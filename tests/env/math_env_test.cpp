// The math environment: generated problems against independent computations (brute-force
// enumeration, substitution of the answer into the problem, GiNaC on the problem's own
// expression), reference solutions, perturbed and copied answers, validation and determinism.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <ginac/ginac.h>

#include "common/error.h"
#include "env/registry.h"
#include "env/verifiers/math_answer.h"
#include "error_of.h"

namespace trellis::env {
namespace {

using test::error_of;

std::string boxed(const std::string& answer) { return "So the answer is \\boxed{" + answer + "}."; }

std::string truth(const Task& t) { return t.verification_info["ground_truth"].get<std::string>(); }
std::string family(const Task& t) { return t.metadata["family"].get<std::string>(); }

// The math between the first pair of $...$ signs of a prompt (the first formula).
std::string first_formula(const std::string& prompt) {
  const auto a = prompt.find('$');
  const auto b = prompt.find('$', a + 1);
  return prompt.substr(a + 1, b - a - 1);
}

std::vector<int64_t> integers_in(const std::string& text) {
  std::vector<int64_t> out;
  static const std::regex number("-?\\d+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number);
       it != std::sregex_iterator(); ++it) {
    out.push_back(std::stoll(it->str()));
  }
  return out;
}

// `expression` with every variable replaced by its value in parentheses.
std::string substitute(std::string expression, const std::map<char, std::string>& values) {
  std::string out;
  for (char c : expression) {
    const auto it = values.find(c);
    out += it == values.end() ? std::string(1, c) : "(" + it->second + ")";
  }
  return out;
}

// The answer's values: "a, b" -> {a, b}; "\frac{p \pm q}{r}" -> both signs.
std::vector<std::string> roots_of(const std::string& answer) {
  const auto pm = answer.find("\\pm");
  if (pm != std::string::npos) {
    return {answer.substr(0, pm) + "+" + answer.substr(pm + 3),
            answer.substr(0, pm) + "-" + answer.substr(pm + 3)};
  }
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = answer.find(", ", start)) != std::string::npos; start = comma + 2) {
    out.push_back(answer.substr(start, comma - start));
  }
  out.push_back(answer.substr(start));
  return out;
}

// Checks a task's ground truth against a computation that does not share the generator's code.
void check_independently(const Task& t) {
  const std::string f = family(t), answer = truth(t), formula = first_formula(t.prompt);
  SCOPED_TRACE(t.task_id + " (" + f + "): " + t.prompt + " -> " + answer);
  if (f == "fractions" || f == "radicals") {
    // GiNaC evaluates the problem's own expression.
    EXPECT_TRUE(math_answers_equal(formula, answer));
  } else if (f == "linear_equation") {
    const auto eq = formula.find('=');
    const std::map<char, std::string> x{{'x', answer}};
    EXPECT_TRUE(math_answers_equal(substitute(formula.substr(0, eq), x),
                                   substitute(formula.substr(eq + 1), x)));
  } else if (f == "linear_system") {
    const auto xy = integers_in(answer);
    ASSERT_EQ(xy.size(), 2u);
    const std::map<char, std::string> values{{'x', std::to_string(xy[0])},
                                             {'y', std::to_string(xy[1])}};
    const auto second = t.prompt.substr(t.prompt.find("and $") + 5);
    for (const std::string& e : {formula, second.substr(0, second.find('$'))}) {
      const auto eq = e.find('=');
      EXPECT_TRUE(math_answers_equal(substitute(e.substr(0, eq), values), e.substr(eq + 1))) << e;
    }
  } else if (f == "quadratic") {
    const std::string polynomial = formula.substr(0, formula.find('='));
    for (const std::string& root : roots_of(answer)) {
      EXPECT_TRUE(math_answers_equal(substitute(polynomial, {{'x', root}}), "0")) << root;
    }
  } else if (f == "polynomial") {
    // Leading coefficient a and roots r: the answer equals a(x - r1)(x - r2)...
    const auto numbers = integers_in(t.prompt.substr(t.prompt.find("coefficient")));
    std::string product = std::to_string(numbers[0]);
    for (size_t i = 1; i < numbers.size(); ++i) {
      product += "(x - (" + std::to_string(numbers[i]) + "))";
    }
    EXPECT_TRUE(math_answers_equal(answer, product)) << product;
  } else if (f == "gcd_lcm") {
    const auto numbers = integers_in(t.prompt);
    const bool gcd = t.prompt.find("greatest") != std::string::npos;
    int64_t result = 0;
    for (int64_t candidate = 1; candidate <= 1000000; ++candidate) {  // by search, not by formula
      bool fits = true;
      for (int64_t n : numbers) fits &= gcd ? n % candidate == 0 : candidate % n == 0;
      if (fits) {
        result = candidate;
        if (!gcd) break;
      }
      if (gcd && candidate > numbers[0]) break;
    }
    EXPECT_EQ(answer, std::to_string(result));
  } else if (f == "probability") {
    const auto numbers = integers_in(t.prompt);
    int64_t favourable = 0, outcomes = 0;
    if (t.prompt.find("coin") != std::string::npos) {
      const int64_t n = numbers[0], k = numbers[1];
      for (int64_t mask = 0; mask < (int64_t{1} << n); ++mask) {
        ++outcomes;
        favourable += __builtin_popcountll(static_cast<uint64_t>(mask)) == k;
      }
    } else {
      const int dice = t.prompt.find("Two") == 0 ? 2 : 3;
      const bool at_least = t.prompt.find("at least") != std::string::npos;
      const int64_t target = numbers[0];
      for (int roll = 0; roll < (dice == 2 ? 36 : 216); ++roll) {
        const int sum = roll % 6 + 1 + roll / 6 % 6 + 1 + (dice == 3 ? roll / 36 + 1 : 0);
        ++outcomes;
        favourable += at_least ? sum >= target : sum == target;
      }
    }
    EXPECT_TRUE(
        math_answers_equal(answer, std::to_string(favourable) + "/" + std::to_string(outcomes)));
  } else if (f == "series") {
    const auto numbers = integers_in(t.prompt);  // n, then the first three terms
    const int64_t n = numbers[0];
    std::string sum = "0";
    if (t.prompt.find("arithmetic") != std::string::npos) {
      for (int64_t i = 0; i < n; ++i) {
        sum += "+" + std::to_string(numbers[1] + i * (numbers[2] - numbers[1]));
      }
    } else {  // geometric: the first three terms are integers
      for (int64_t i = 0; i < n; ++i) {
        sum += fmt::format("+{}*({}/{})^{{{}}}", numbers[1], numbers[2], numbers[1], i);
      }
    }
    EXPECT_TRUE(math_answers_equal(answer, sum)) << sum;
  } else if (f == "percent") {
    const auto numbers = integers_in(t.prompt);
    std::string value;
    if (t.prompt.find("What is") == 0) {
      value = fmt::format("{}*{}/100", numbers[0], numbers[1]);
    } else if (t.prompt.find("price") != std::string::npos) {
      value = fmt::format("100*|{}-{}|/{}\\%", numbers[1], numbers[0], numbers[0]);
    } else {
      value = fmt::format("(100+{})(100-{})/100\\%", numbers[0], numbers[1]);
    }
    EXPECT_TRUE(math_answers_equal(answer, value)) << value;
  } else if (f == "coefficient") {
    // Checked in CoefficientsMatchAnExpansionByGiNaC.
  } else {
    ADD_FAILURE() << "unknown family " << f;
  }
}

class MathEnvironment : public ::testing::Test {
 protected:
  std::unique_ptr<Environment> env_ = make_environment("math");
};

TEST_F(MathEnvironment, SolutionsScoreOneAndAnswersAreRightAtEveryDifficulty) {
  for (int d = kMinDifficulty; d <= kMaxDifficulty; ++d) {
    std::set<std::string> families;
    for (uint64_t seed = 0; seed < 150; ++seed) {
      const Task t = env_->generate(seed, d);
      ASSERT_NO_THROW(env_->validate(t, t.task_id));
      ASSERT_TRUE(t.solution);
      const Score s = env_->score(t, *t.solution);
      EXPECT_EQ(s.reward, 1.0) << t.task_id << ": " << s.reason << "\n" << *t.solution;
      check_independently(t);
      families.insert(family(t));
    }
    EXPECT_EQ(families.size(), 11u) << "difficulty " << d;
  }
}

TEST_F(MathEnvironment, CoefficientsMatchAnExpansionByGiNaC) {
  // The generator multiplies integer coefficient lists; here GiNaC expands the prompt's product.
  static const std::regex factor("\\((-?)(\\d*)x ([+-]) (\\d+)\\)(?:\\^\\{(\\d+)\\})?");
  int checked = 0;
  for (uint64_t seed = 0; seed < 600 && checked < 60; ++seed) {
    const Task t = env_->generate(seed, 1 + static_cast<int>(seed % 10));
    if (family(t) != "coefficient") continue;
    ++checked;
    const GiNaC::symbol x("x");
    GiNaC::ex product = 1;
    const std::string expression = t.prompt.substr(t.prompt.find("expansion of"));
    for (auto it = std::sregex_iterator(expression.begin(), expression.end(), factor);
         it != std::sregex_iterator(); ++it) {
      const auto& m = *it;
      const long a = (m[1] == "-" ? -1 : 1) * (m[2].length() ? std::stol(m[2]) : 1);
      const long b = (m[3] == "-" ? -1 : 1) * std::stol(m[4]);
      product *= GiNaC::pow(a * x + b, m[5].matched ? std::stol(m[5]) : 1);
    }
    const auto k_text = integers_in(t.prompt.substr(0, t.prompt.find("expansion")));
    const int k = t.prompt.find("constant term") != std::string::npos ? 0
                  : k_text.empty()                                    ? 1
                                                                      : static_cast<int>(k_text[0]);
    std::ostringstream c;
    c << GiNaC::expand(product).coeff(x, k);
    EXPECT_EQ(truth(t), c.str()) << t.prompt;
  }
  EXPECT_GE(checked, 30);
}

TEST_F(MathEnvironment, DifficultyChangesTheProblems) {
  // Fractions: 2 terms at d1, 5 at d10. Quadratics: integer roots at d1, radicals at d10.
  auto count_of = [&](int d, const std::string& fam, const std::function<bool(const Task&)>& p) {
    int hits = 0, total = 0;
    for (uint64_t seed = 0; seed < 300; ++seed) {
      const Task t = env_->generate(seed, d);
      if (family(t) != fam) continue;
      ++total;
      hits += p(t);
    }
    EXPECT_GT(total, 5);
    return std::pair{hits, total};
  };
  const auto fracs = [](const Task& t) {
    int n = 0;
    for (size_t at = 0; (at = t.prompt.find("\\frac", at)) != std::string::npos; ++at) ++n;
    return n;
  };
  auto [two, total1] = count_of(1, "fractions", [&](const Task& t) { return fracs(t) == 2; });
  EXPECT_EQ(two, total1);
  auto [many, total10] = count_of(10, "fractions", [&](const Task& t) { return fracs(t) >= 5; });
  EXPECT_EQ(many, total10);
  auto [radical1, q1] = count_of(
      1, "quadratic", [](const Task& t) { return truth(t).find("\\sqrt") != std::string::npos; });
  EXPECT_EQ(radical1, 0);
  auto [radical10, q10] = count_of(
      10, "quadratic", [](const Task& t) { return truth(t).find("\\sqrt") != std::string::npos; });
  EXPECT_EQ(radical10, q10);
}

TEST_F(MathEnvironment, PerturbedAnswersScoreZero) {
  for (int d = kMinDifficulty; d <= kMaxDifficulty; ++d) {
    for (uint64_t seed = 0; seed < 60; ++seed) {
      const Task t = env_->generate(seed, d);
      std::string wrong = truth(t);
      // Change the last digit: every family's answer holds one, and it always matters.
      const auto at = wrong.find_last_of("0123456789");
      ASSERT_NE(at, std::string::npos) << wrong;
      wrong[at] = wrong[at] == '9' ? '8' : static_cast<char>(wrong[at] + 1);
      const Score s = env_->score(t, boxed(wrong));
      EXPECT_EQ(s.reward, 0.0) << t.task_id << ": " << truth(t) << " vs " << wrong;
      EXPECT_NE(s.reason.find("differs from the expected"), std::string::npos) << s.reason;
    }
  }
}

TEST_F(MathEnvironment, EquivalentFormsScoreOne) {
  Task t = env_->generate(1, 1);
  t.verification_info = {{"ground_truth", "\\frac{1}{2}"}, {"simplified", true}};
  EXPECT_EQ(env_->score(t, boxed("0.5")).reward, 1.0);
  EXPECT_EQ(env_->score(t, boxed("\\dfrac12")).reward, 1.0);
  EXPECT_EQ(env_->score(t, "Answer: 1/2").reward, 1.0);
  EXPECT_EQ(env_->score(t, boxed("50\\%")).reward, 1.0);
  t.verification_info = {{"ground_truth", "(3, -2)"}};
  EXPECT_EQ(env_->score(t, boxed("\\left(3,-2\\right)")).reward, 1.0);
  EXPECT_EQ(env_->score(t, boxed("(x, y) = (3, -2)")).reward, 1.0);
  t.verification_info = {{"ground_truth", "x^2-1"}};
  EXPECT_EQ(env_->score(t, boxed("(x-1)(x+1)")).reward, 1.0);
}

TEST_F(MathEnvironment, CopyingTheQuestionDoesNotScore) {
  int copied = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const Task t = env_->generate(seed, 1 + static_cast<int>(seed % 10));
    const std::string f = family(t);
    if (f != "fractions" && f != "radicals") continue;
    const std::string question = first_formula(t.prompt);
    if (math_answers_equal(question, truth(t), {.require_simplified = true})) continue;
    ++copied;
    const Score s = env_->score(t, boxed(question));
    EXPECT_EQ(s.reward, 0.0) << t.prompt;
    EXPECT_NE(s.reason.find("not simplified"), std::string::npos) << s.reason;
  }
  EXPECT_GE(copied, 20);
}

TEST_F(MathEnvironment, ReasonsSayWhatHappened) {
  Task t = env_->generate(5, 3);
  t.verification_info = {{"ground_truth", "4"}};
  Score s = env_->score(t, boxed("3"));
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_NE(s.reason.find("answer 3 differs from the expected 4"), std::string::npos) << s.reason;
  s = env_->score(t, "I think it is 4.");
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "no \\boxed{} or Answer: line found");
  s = env_->score(t, "\\boxed{}");
  EXPECT_EQ(s.reward, 0.0);
  s = env_->score(t, "<think>maybe \\boxed{3}</think> so \\boxed{4}");
  EXPECT_EQ(s.reward, 1.0);
  EXPECT_NE(s.reason.find("answer 4 equals the expected 4"), std::string::npos) << s.reason;
  t.verification_info = {{"ground_truth", "\\frac{5}{6}"}, {"simplified", true}};
  s = env_->score(t, boxed("\\frac{10}{12}"));
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_NE(s.reason.find("but is not simplified"), std::string::npos) << s.reason;
  // Hostile replies: zero, a reason, no exception.
  for (const std::string& reply :
       {boxed("x^{999999999}"), boxed("10^{10^{10}}"), "\\boxed{" + std::string(1 << 20, '{'),
        boxed(std::string(5000, '9')), std::string("\\boxed{\xff\xfe}")}) {
    Score h;
    ASSERT_NO_THROW(h = env_->score(t, reply));
    EXPECT_EQ(h.reward, 0.0);
    EXPECT_FALSE(h.reason.empty());
    EXPECT_LT(h.reason.size(), 300u);
  }
}

TEST_F(MathEnvironment, ValidateRejectsBadGroundTruth) {
  Task t = env_->generate(2, 2);
  EXPECT_EQ(error_of([&] { env_->validate(t, "d.jsonl:1"); }), "");
  const auto check = [&](const Json& info, const std::string& what) {
    Task bad = t;
    bad.verification_info = info;
    const std::string e = error_of([&] { env_->validate(bad, "d.jsonl:7"); });
    EXPECT_NE(e.find("d.jsonl:7"), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  check(Json::object(), "ground_truth");
  check({{"answer", "3"}}, "ground_truth");
  check({{"ground_truth", 3}}, "ground_truth must be a string");
  check({{"ground_truth", ""}}, "empty");
  check({{"ground_truth", "$ \\, $"}}, "empty");
  check({{"ground_truth", std::string(kMaxMathAnswerChars + 1, '1')}}, "longer");
  check({{"ground_truth", "3"}, {"simplified", "yes"}}, "simplified");
  check(Json::array(), "object");
  // Ground truths we cannot parse still validate: they are matched as normalised text.
  Task text = t;
  text.verification_info = {{"ground_truth", "\\text{Tuesday}"}};
  EXPECT_EQ(error_of([&] { env_->validate(text, "x"); }), "");
  EXPECT_EQ(env_->score(text, boxed("tuesday")).reward, 1.0);
}

TEST_F(MathEnvironment, GenerationIsDeterministic) {
  for (int d : {1, 6, 10}) {
    for (uint64_t seed : {0ull, 1ull, 123456789ull}) {
      EXPECT_EQ(task_to_json(env_->generate(seed, d)), task_to_json(env_->generate(seed, d)));
    }
  }
  std::set<std::string> prompts;
  for (uint64_t seed = 0; seed < 100; ++seed) prompts.insert(env_->generate(seed, 7).prompt);
  EXPECT_GT(prompts.size(), 90u);
  EXPECT_NE(env_->generate(3, 2).task_id, env_->generate(4, 2).task_id);
  EXPECT_NE(error_of([&] { env_->generate(1, 0); }), "");
  EXPECT_NE(error_of([&] { env_->generate(1, 11); }), "");
}

}  // namespace
}  // namespace trellis::env
