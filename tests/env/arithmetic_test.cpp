// Arithmetic: every generated answer equals GiNaC's own evaluation of the expression (a second,
// independent parser), values grow past int64 at high difficulty, the answer reader tolerates
// the usual spellings of an integer and nothing else, and malformed answers score 0.
#include <ginac/ginac.h>
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "common/error.h"
#include "env/environments/environments.h"
#include "env_test_util.h"

namespace trellis::env {
namespace {

std::string ginac_value(const std::string& expression) {
  GiNaC::parser reader;
  const GiNaC::ex value = reader(expression);
  EXPECT_TRUE(GiNaC::is_a<GiNaC::numeric>(value)) << expression;
  std::ostringstream out;
  out << value;
  return out.str();
}

Task task_with(const std::string& expression, const std::string& answer) {
  Task t;
  t.env = "arithmetic";
  t.verification_info = {{"expression", expression}, {"answer", answer}};
  return t;
}

using test::tagged;

TEST(Arithmetic, GeneratedAnswersMatchAnIndependentEvaluator) {
  const auto env = make_arithmetic_environment();
  for (int d = kMinDifficulty; d <= kMaxDifficulty; ++d) {
    for (uint64_t seed = 0; seed < 30; ++seed) {
      const Task task = env->generate(seed, d);
      ASSERT_NO_THROW(env->validate(task, "generated"));
      const auto expression = task.verification_info["expression"].get<std::string>();
      const auto answer = task.verification_info["answer"].get<std::string>();
      EXPECT_EQ(answer, ginac_value(expression)) << expression;
      EXPECT_NE(task.prompt.find(expression), std::string::npos);
      ASSERT_TRUE(task.solution);
      const Score s = env->score(task, *task.solution);
      EXPECT_EQ(s.reward, 1.0) << *task.solution << ": " << s.reason;
    }
  }
}

TEST(Arithmetic, DifficultyGrowsOperandsDigitsAndOperators) {
  const auto env = make_arithmetic_environment();
  struct Stats {
    size_t most_operators = 0, longest_answer = 0;
    bool products = false, parentheses = false;
  };
  auto stats = [&](int d) {
    Stats s;
    for (uint64_t seed = 0; seed < 40; ++seed) {
      const Task t = env->generate(seed, d);
      const auto e = t.verification_info["expression"].get<std::string>();
      const auto a = t.verification_info["answer"].get<std::string>();
      s.most_operators =
          std::max<size_t>(s.most_operators, std::count(e.begin(), e.end(), ' ') / 2);
      s.longest_answer = std::max(s.longest_answer, a.size() - (a[0] == '-'));
      s.products = s.products || e.find('*') != std::string::npos;
      s.parentheses = s.parentheses || e.find('(') != std::string::npos;
    }
    return s;
  };
  const Stats easy = stats(1), middle = stats(4), hard = stats(10);
  EXPECT_EQ(easy.most_operators, 1u);
  EXPECT_FALSE(easy.products);
  EXPECT_FALSE(easy.parentheses);
  EXPECT_LE(easy.longest_answer, 3u);
  EXPECT_TRUE(middle.products);
  EXPECT_FALSE(middle.parentheses);
  EXPECT_EQ(hard.most_operators, 5u);
  EXPECT_TRUE(hard.parentheses);
  EXPECT_GT(hard.longest_answer, 19u);  // beyond int64
}

TEST(Arithmetic, ReadsTheUsualSpellingsOfAnInteger) {
  const auto env = make_arithmetic_environment();
  const Task t = task_with("1000 * 1234 + 567", "1234567");
  for (const std::string answer : {"1234567", "1,234,567", "1 234 567", "+1234567", "1_234_567",
                                   "1\xE2\x80\x89"
                                   "234\xE2\x80\x89"
                                   "567",
                                   "1234567.0", "001234567", "  1234567  "}) {
    const Score s = env->score(t, "Working... <answer>" + answer + "</answer>");
    EXPECT_EQ(s.reward, 1.0) << answer << ": " << s.reason;
  }
  const Task negative = task_with("5 - 12", "-7");
  EXPECT_EQ(env->score(negative, tagged("-7")).reward, 1.0);
  EXPECT_EQ(env->score(negative, tagged("\xE2\x88\x92"
                                        "7"))
                .reward,
            1.0);  // U+2212
  EXPECT_EQ(env->score(negative, tagged("- 7")).reward, 1.0);
  EXPECT_EQ(env->score(negative, tagged("7")).reward, 0.0);
  const Task zero = task_with("3 - 3", "0");
  EXPECT_EQ(env->score(zero, tagged("-0")).reward, 1.0);
  EXPECT_EQ(env->score(zero, tagged("000")).reward, 1.0);
}

TEST(Arithmetic, ScoresWrongAndMalformedAnswersZero) {
  const auto env = make_arithmetic_environment();
  const Task t = task_with("1000 * 1234 + 567", "1234567");
  auto check = [&](const std::string& completion, const std::string& reason) {
    const Score s = env->score(t, completion);
    EXPECT_EQ(s.reward, 0.0) << completion.substr(0, 80);
    EXPECT_NE(s.reason.find(reason), std::string::npos) << s.reason;
    EXPECT_EQ(s.reason.find('\n'), std::string::npos) << s.reason;
    EXPECT_LE(s.reason.size(), 120u);
  };
  check(tagged("1234568"), "answer 1234568 is not 1234567");
  check(tagged("12,34,567"), "bad digit grouping");
  check(tagged("1234,567,"), "bad digit grouping");
  check(tagged("1234567.5"), "not an integer");
  check(tagged("1234567/1"), "not an integer");
  check(tagged("1000 * 1234 + 567"), "not an integer");
  check(tagged("1e6"), "not an integer");
  check(tagged("((((1234567))))"), "not an integer");
  check(tagged("99999999999999999999999*9999999999999"), "not an integer");
  check(tagged("1/0"), "not an integer");
  check(tagged("twelve\nlines"), "not an integer");
  check(tagged("\xff\xfe"), "not an integer");
  check(tagged(""), "empty answer");
  check(tagged("+"), "has no digits");
  check(tagged("--5"), "not an integer");
  check("1234567", "no <answer>");
  check("<answer>1234567", "no <answer>");
  check("", "no <answer>");
  check(tagged(std::string(1 << 20, '1')), "longer than");
  check(tagged("1234567") + " actually " + tagged("7654321"), "not 1234567");
  // A long correct-looking prefix does not help: the answer is compared whole.
  check(tagged("1234567" + std::string(200, '0')), "is not 1234567");
}

TEST(Arithmetic, IsDeterministicPerSeedAndVariesAcrossSeeds) {
  const auto env = make_arithmetic_environment();
  EXPECT_EQ(task_to_json(env->generate(9, 7)), task_to_json(env->generate(9, 7)));
  std::set<std::string> prompts;
  for (uint64_t seed = 0; seed < 20; ++seed) prompts.insert(env->generate(seed, 7).prompt);
  EXPECT_EQ(prompts.size(), 20u);
  EXPECT_NE(env->generate(3, 7).prompt, env->generate(3, 8).prompt);
  EXPECT_THROW(env->generate(1, 0), Error);
}

TEST(Arithmetic, ValidateNamesTheBadField) {
  const auto env = make_arithmetic_environment();
  auto error_of = [&](Json info) {
    return test::validation_error(*env, std::move(info), "set.jsonl:3");
  };
  EXPECT_EQ(error_of({{"expression", "2 * (3 + 4)"}, {"answer", "14"}}), "");
  EXPECT_EQ(error_of({{"expression", "-2 * 3"}, {"answer", "-6"}}), "");
  EXPECT_EQ(error_of({{"expression", "10 / 2"}, {"answer", "5"}}), "");
  EXPECT_NE(error_of("x").find("set.jsonl:3"), std::string::npos);
  EXPECT_NE(error_of({{"answer", "14"}}).find("expression"), std::string::npos);
  EXPECT_NE(error_of({{"expression", "2 * 7"}}).find("answer"), std::string::npos);
  EXPECT_NE(error_of({{"expression", "2 * 7"}, {"answer", 14}}).find("answer"), std::string::npos);
  EXPECT_NE(error_of({{"expression", "2 * 7"}, {"answer", "15"}}).find("not the value 14"),
            std::string::npos);
  EXPECT_NE(error_of({{"expression", "2 * 7"}, {"answer", "fourteen"}}).find("answer"),
            std::string::npos);
  EXPECT_NE(error_of({{"expression", "2 * (7"}, {"answer", "14"}}).find("unclosed"),
            std::string::npos);
  EXPECT_NE(error_of({{"expression", "7 / 2"}, {"answer", "3"}}).find("non-integer"),
            std::string::npos);
  EXPECT_NE(error_of({{"expression", "7 / 0"}, {"answer", "3"}}).find("division by zero"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::env
