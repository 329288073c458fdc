// Math answer extraction and equivalence: a table of answer pairs with their expected verdicts,
// the documented policies (percent, decimals, units, lists), and hostile input.
#include "env/verifiers/math_answer.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace trellis::env {
namespace {

struct Pair {
  const char* given;
  const char* expected;
  bool equal;
};

// Each pair is also checked the other way round unless marked one-way below: equivalence is
// symmetric except where a policy reads the expected answer specially (relations, choices).
const Pair kPairs[] = {
    // Fractions, decimals, radicals: the three forms of one half, and 2 sqrt 2 = sqrt 8.
    {"1/2", "0.5", true},
    {"\\frac{1}{2}", "0.5", true},
    {"\\frac{1}{2}", "1/2", true},
    {"\\dfrac{1}{2}", "\\frac12", true},
    {"\\tfrac{1}{2}", ".5", true},
    {"1.5", "\\frac{3}{2}", true},
    {"0.1+0.2", "0.3", true},
    {"-\\frac{3}{4}", "\\frac{-3}{4}", true},
    {"\\frac{3}{-4}", "-0.75", true},
    {"2\\sqrt{2}", "\\sqrt{8}", true},
    {"\\sqrt{12}+\\sqrt{27}", "5\\sqrt{3}", true},
    {"\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", true},
    {"\\sqrt[3]{8}", "2", true},
    {"(1+\\sqrt{2})^2", "3+2\\sqrt{2}", true},
    {"2\\frac{1}{2}", "\\frac{5}{2}", true},  // a mixed number
    {"2(\\frac{1}{2})", "1", true},           // but not in parentheses
    {"\\sqrt[3]{-8}", "-2", true},            // the real cube root
    {"10^{3}", "1000", true},
    {"2 \\times 3", "6", true},
    {"12 \\div 4", "3", true},
    {"\\binom{5}{2}", "10", true},
    {"5!", "120", true},
    {"\\lvert -3 \\rvert", "3", true},
    {"\\log_2 8", "3", true},
    {"e^{\\ln 2}", "2", true},
    {"\\frac{\\sqrt{3}}{2}", "\\sin(\\pi/3)", true},
    {"\\pi/2", "\\frac{\\pi}{2}", true},
    {"3+4i", "4i+3", true},
    {"0.3333333", "\\frac{1}{3}", true},  // decimals agree to a relative 1e-6
    {"$\\frac{1}{2}$", "1/2", true},
    // Algebra: symbolic equality, implicit multiplication.
    {"x^2-1", "(x-1)(x+1)", true},
    {"(x+1)^2", "x^2+2x+1", true},
    {"(x+y)^3", "x^3+3x^2y+3xy^2+y^3", true},
    {"\\frac{x}{2}", "0.5x", true},
    {"2x", "x+x", true},
    {"x(x+1)", "x^2+x", true},
    {"2\\pi r", "2r\\pi", true},
    {"x^{-1}", "\\frac{1}{x}", true},
    {"\\frac{2}{x^2-1}", "\\frac{1}{x-1}-\\frac{1}{x+1}", true},
    {"\\sin^2 x + \\cos^2 x", "1", true},
    {"y = 2x + 1", "y=1+2x", true},
    // Units, degrees, separators, money, percent.
    {"5 \\text{ cm}", "5", true},
    {"5 cm", "5", true},
    {"30^\\circ", "30", true},
    {"30^{\\circ}", "30", true},
    {"1,000", "1000", true},
    {"1{,}000{,}000", "1000000", true},
    {"\\$1,000.00", "1000", true},
    {"50\\%", "50", true},
    {"50\\%", "0.5", true},
    {"\\frac{1}{2}", "50\\%", true},
    // Tuples, intervals, sets, lists, relations, choices, text.
    {"\\left( 3, -2 \\right)", "(3,-2)", true},
    {"(\\frac{2}{2}, 2)", "(1, 2)", true},
    {"\\left[1, 2\\right)", "[1,2)", true},
    {"\\left(-\\infty, 3\\right]", "(-\\infty,3]", true},
    {"\\{1, 2\\}", "\\{2, 1\\}", true},
    {"2, -3", "-3, 2", true},
    {"\\{5\\}", "5", true},
    {"[1,2) \\cup (3, \\infty)", "(3,\\infty) \\cup [1,2)", true},
    {"1 \\pm \\sqrt{2}", "1+\\sqrt{2}, 1-\\sqrt{2}", true},
    {"x = 3", "3", true},
    {"x \\in [1, 2]", "[1,2]", true},
    {"x = 1 \\text{ or } x = 2", "1, 2", true},
    {"(B)", "B", true},
    {"\\text{(B)}", "B", true},
    {"b", "B", true},
    {"\\text{Tuesday}", "tuesday", true},
    {"\\begin{pmatrix} 1 \\\\ -2 \\end{pmatrix}", "(1, -2)", true},
    {"1\\,000", "1000", true},
    {"\\$5", "5", true},

    {"1/3", "0.333", false},  // a rounded decimal must agree to 1e-6
    {"3.14", "\\pi", false},
    {"1.414", "\\sqrt{2}", false},
    {"2.718", "e", false},
    {"3", "4", false},
    {"-3", "3", false},
    {"\\frac{1}{2}", "\\frac{1}{3}", false},
    {"10^{20}+1", "10^{20}", false},  // exact numbers compare exactly
    {"2\\sqrt{2}", "\\sqrt{6}", false},
    {"\\sqrt{2}+\\sqrt{3}", "\\sqrt{5}", false},
    {"2\\frac{1}{2}", "1", false},
    {"\\binom{5}{2}", "20", false},
    {"x^2-1", "(x-1)^2", false},
    {"x^2+1", "x^2-1", false},
    {"x^2", "x^{3}", false},
    {"2x", "x^2", false},
    {"\\frac{1}{x}", "x", false},
    {"x", "y", false},
    {"5", "5x", false},
    {"\\sin x", "\\cos x", false},
    {"50\\%", "5", false},
    {"0.5", "50", false},  // without a % sign there is no percent reading
    {"50\\%", "0.5\\%", false},
    {"1,001", "1000", false},
    {"(1, 2)", "(2, 1)", false},
    {"[1, 2)", "[1, 2]", false},
    {"(1, 2)", "\\{1, 2\\}", false},
    {"(1, 2)", "(1, 2, 3)", false},
    {"2, 3", "2, 3, 4", false},
    {"\\{1, 2\\}", "\\{1, 3\\}", false},
    {"1 \\pm \\sqrt{2}", "1+\\sqrt{2}", false},
    {"\\infty", "-\\infty", false},
    {"x > 3", "3", false},
    {"x = 3", "y = 3", false},
    {"(A)", "B", false},
    {"\\text{Monday}", "\\text{Tuesday}", false},
};

TEST(MathAnswer, TableOfPairs) {
  EXPECT_GE(std::size(kPairs), 60u);
  for (const Pair& p : kPairs) {
    const MathVerdict v = compare_math_answers(p.given, p.expected);
    EXPECT_EQ(v.equal, p.equal) << "given '" << p.given << "', expected '" << p.expected
                                << "': " << v.detail;
    EXPECT_FALSE(v.detail.empty());
  }
}

TEST(MathAnswer, EquivalenceIsSymmetricForPlainValues) {
  // Relations, choices and the one-sided percent reading are deliberately asymmetric; values,
  // tuples and sets are not.
  for (const Pair& p : kPairs) {
    const std::string g = p.given, e = p.expected;
    if (g.find('=') != std::string::npos || e.find('=') != std::string::npos ||
        g.find("\\in") != std::string::npos || e.size() == 1) {
      continue;
    }
    EXPECT_EQ(math_answers_equal(p.expected, p.given), p.equal)
        << "given '" << p.expected << "', expected '" << p.given << "'";
  }
}

TEST(MathAnswer, PercentPolicy) {
  // A trailing % reads as a unit (50% = 50) or as a value (50% = 0.5), whichever side has it.
  EXPECT_TRUE(math_answers_equal("50\\%", "50"));
  EXPECT_TRUE(math_answers_equal("50", "50\\%"));
  EXPECT_TRUE(math_answers_equal("50\\%", "\\frac{1}{2}"));
  EXPECT_TRUE(math_answers_equal("0.5", "50\\%"));
  EXPECT_TRUE(math_answers_equal("50%", "50\\%"));
  EXPECT_TRUE(math_answers_equal("12.5\\%", "\\frac{1}{8}"));
  // Both sides with %: the numbers must match.
  EXPECT_FALSE(math_answers_equal("50\\%", "0.5\\%"));
  // Neither side with %: no scaling.
  EXPECT_FALSE(math_answers_equal("0.5", "50"));
  EXPECT_FALSE(math_answers_equal("25\\%", "0.5"));
}

TEST(MathAnswer, DecimalsAreExactUnlessRounded) {
  EXPECT_TRUE(compare_math_answers("0.5", "\\frac{1}{2}").equal);
  EXPECT_TRUE(math_answers_equal("0.6666667", "\\frac{2}{3}"));
  EXPECT_FALSE(math_answers_equal("0.667", "\\frac{2}{3}"));
  EXPECT_FALSE(math_answers_equal("100000000000000000001", "100000000000000000000"));
  EXPECT_TRUE(math_answers_equal("1.00000000000000000001", "1"));  // decimals: 1e-6 relative
}

TEST(MathAnswer, SimplifiedPolicy) {
  const MathOptions simplified{.require_simplified = true};
  struct Case {
    const char* given;
    const char* expected;
    const char* why;  // "" when the answer passes
  };
  const Case cases[] = {
      {"\\frac{5}{6}", "\\frac{5}{6}", ""},
      {"0.8333333", "\\frac{5}{6}", ""},
      {"-\\frac{3}{4}", "\\frac{-3}{4}", ""},
      {"\\frac{-3}{4}", "-\\frac{3}{4}", ""},
      {"\\frac{3+\\sqrt{13}}{2}", "\\frac{3}{2}+\\frac{\\sqrt{13}}{2}", ""},
      {"\\sqrt{3} \\cdot 5", "5\\sqrt{3}", ""},
      {"x = 5", "5", ""},
      {"90\\%", "0.9", ""},
      {"\\left(3,-2\\right)", "(3, -2)", ""},
      {"x^2+2x+1", "(x+1)^2", ""},  // symbols may be arranged freely
      {"\\frac{10}{12}", "\\frac{5}{6}", "lowest terms"},
      {"\\frac{6}{3}", "2", "lowest terms"},
      {"\\frac{1}{2}+\\frac{1}{3}", "\\frac{5}{6}", "lowest terms"},
      {"0.35 \\cdot 240", "84", "lowest terms"},
      {"2^{10}", "1024", "lowest terms"},
      {"5!", "120", "lowest terms"},
      {"2\\frac{1}{2}", "\\frac{5}{2}", "lowest terms"},
      {"\\sqrt{75}", "5\\sqrt{3}", "square factor 25"},
      {"\\frac{5}{\\sqrt{3}}", "\\frac{5\\sqrt{3}}{3}", "denominator"},
      {"(3, \\frac{4}{2})", "(3, 2)", "lowest terms"},
  };
  for (const Case& c : cases) {
    const MathVerdict v = compare_math_answers(c.given, c.expected, simplified);
    const bool passes = std::string(c.why).empty();
    EXPECT_EQ(v.equal, passes) << c.given << ": " << v.detail;
    EXPECT_EQ(v.unsimplified, !passes) << c.given << ": " << v.detail;
    if (!passes) EXPECT_NE(v.detail.find(c.why), std::string::npos) << c.given << ": " << v.detail;
    // Without the option, each of them is simply equal.
    EXPECT_TRUE(math_answers_equal(c.given, c.expected)) << c.given;
  }
  // A wrong answer is wrong, not unsimplified.
  const MathVerdict wrong = compare_math_answers("\\frac{10}{14}", "\\frac{5}{6}", simplified);
  EXPECT_FALSE(wrong.equal);
  EXPECT_FALSE(wrong.unsimplified);
}

TEST(MathAnswer, ExpectedEquationAcceptsItsValue) {
  EXPECT_TRUE(math_answers_equal("3", "x = 3"));
  EXPECT_TRUE(math_answers_equal("x=3", "x = 3"));
  EXPECT_TRUE(math_answers_equal("3 = x", "x = 3"));
  EXPECT_FALSE(math_answers_equal("4", "x = 3"));
  EXPECT_FALSE(math_answers_equal("x < 3", "x = 3"));
}

TEST(MathAnswer, Normalisation) {
  EXPECT_EQ(normalize_math_answer("\\left( \\dfrac{1}{2} \\right)"), "(\\frac{1}{2})");
  EXPECT_EQ(normalize_math_answer("5 \\text{ cm}"), "5");
  EXPECT_EQ(normalize_math_answer("5 \\mathrm{cm}^2"), "5");
  EXPECT_EQ(normalize_math_answer("5\\text{ m}^{2}"), "5");
  EXPECT_EQ(normalize_math_answer("1,000"), "1000");
  EXPECT_EQ(normalize_math_answer("(1, 2)"), "(1,2)");
  EXPECT_EQ(normalize_math_answer("\\$1,000"), "1000");
  EXPECT_EQ(normalize_math_answer("\\pi r^2"), "\\pi r^2");
  EXPECT_EQ(normalize_math_answer("\\text{(B)}"), "(B)");
  EXPECT_EQ(normalize_math_answer("3\\,\\!\\;x"), "3x");
  EXPECT_EQ(normalize_math_answer("\\boxed{7}"), "{7}");
  EXPECT_EQ(normalize_math_answer("\u03c0"), "\\pi");
  EXPECT_EQ(normalize_math_answer("5."), "5");
  EXPECT_EQ(normalize_math_answer(""), std::nullopt);
  EXPECT_EQ(normalize_math_answer("$ $"), std::nullopt);
  EXPECT_EQ(normalize_math_answer(std::string(kMaxMathAnswerChars + 1, '1')), std::nullopt);
}

TEST(MathAnswer, ExtractsTheLastBox) {
  EXPECT_EQ(extract_boxed_answer("so \\boxed{\\frac{1}{2}}."), "\\frac{1}{2}");
  EXPECT_EQ(extract_boxed_answer("\\boxed{\\frac{a^{2}}{b_{1}}}"), "\\frac{a^{2}}{b_{1}}");
  EXPECT_EQ(extract_boxed_answer("maybe \\boxed{3}, no: \\boxed{4}"), "4");
  EXPECT_EQ(extract_boxed_answer("\\boxed{\\{1, 2\\}}"), "\\{1, 2\\}");
  EXPECT_EQ(extract_boxed_answer("$\\boxed 5$"), "5");
  EXPECT_EQ(extract_boxed_answer("\\fbox{7}"), "7");
  EXPECT_EQ(extract_boxed_answer("\\boxed{ 7 } then \\boxedfoo{9}"), "7");
  EXPECT_EQ(extract_boxed_answer("\\boxed{}"), "");
  // The last box is cut off: no answer (an earlier box was not the final word).
  EXPECT_EQ(extract_boxed_answer("\\boxed{3} and \\boxed{\\frac{1}{"), std::nullopt);
}

TEST(MathAnswer, FallsBackToAnAnswerLine) {
  EXPECT_EQ(extract_boxed_answer("work\nAnswer: 42\n"), "42");
  EXPECT_EQ(extract_boxed_answer("Answer: 1\nthinking again\nanswer: 2."), "2");
  EXPECT_EQ(extract_boxed_answer("**Final Answer:** $\\frac12$"), "\\frac12");
  EXPECT_EQ(extract_boxed_answer("**Answer:** 6"), "6");
  EXPECT_EQ(extract_boxed_answer("## Final Answer\n\n$5$\n"), "5");
  EXPECT_EQ(extract_boxed_answer("The final answer is $7$."), "7");
  EXPECT_EQ(extract_boxed_answer("Answering this needs care: 5"), std::nullopt);
  EXPECT_EQ(extract_boxed_answer("no answer here"), std::nullopt);
  EXPECT_EQ(extract_boxed_answer(""), std::nullopt);
}

TEST(MathAnswer, HostileAnswersScoreZeroWithAReason) {
  struct Hostile {
    std::string given;
    const char* why;  // a word the reason must hold
  };
  const std::vector<Hostile> cases = {
      {"x^{999999999}", "exponent"},
      {"10^{10^{10}}", "bits"},
      {"2^{2^{2^{2^{2^{2}}}}}", "bits"},
      {"x^{10^{10^{10}}}", "bits"},
      {"(10^{1000})^{1000}", "bits"},
      {"e^{e^{e^{10}}}", "exponent"},
      {"1000000!", "factorial"},
      {"(1/2)!", "factorial"},
      {"\\binom{1000000}{500000}", "binomial"},
      {"\\sqrt[1000000]{2}", "root"},
      {"\\frac{1}{0}", "division by zero"},
      {"0^{-1}", "division by zero"},
      {"0^{0}", "0^0"},
      // GiNaC would take these, and throw (leaking memory) once a point or evalf makes the
      // exponent a number that is not positive.
      {"0^{i}", "not a positive number"},
      {"\\frac{x}{0^{y}}", "not a positive number"},
      {"0^{\\pi - 4}", "not a positive number"},
      {"\\frac{1}{2", "unbalanced"},
      {"((((1", "unbalanced"},
      {"1)", "unbalanced"},
      {std::string(kMaxMathAnswerChars + 1, '{'), "longer"},
      {std::string(1 << 20, '{'), "longer"},
      {std::string(400, '-') + "1", "deeply"},
      {std::string(60, '(') + "1" + std::string(60, ')'), "deeply"},
      {"\xff\xfe\x80", "0xff"},
      {"", "empty"},
      {"\\frac{1}{2}}{", "unbalanced"},
      {"\\foo{3}", "unsupported"},
  };
  for (const Hostile& h : cases) {
    MathVerdict v;
    EXPECT_NO_THROW(v = compare_math_answers(h.given, "1")) << h.given.substr(0, 40);
    EXPECT_FALSE(v.equal) << h.given.substr(0, 40);
    EXPECT_NE(v.detail.find(h.why), std::string::npos) << h.given.substr(0, 40) << ": " << v.detail;
  }
  // The same guards protect the expected side.
  EXPECT_FALSE(math_answers_equal("1", "x^{999999999}"));
  // Equal strings take the fast path, where no algebra runs.
  EXPECT_TRUE(math_answers_equal("x^{999999999}", "x^{999999999}"));
}

// Expressions compared at points: a point where one is undefined (a pole) is skipped, and the
// others decide.
TEST(MathAnswer, APoleAtAPointIsSkipped) {
  // 24/61 is the first point of x; normal() cannot cancel the sin^2 + cos^2 on its own.
  EXPECT_TRUE(math_answers_equal("\\frac{\\sin^2 x + \\cos^2 x}{x - \\frac{24}{61}}",
                                 "\\frac{61}{61x - 24}"));
  EXPECT_FALSE(math_answers_equal("\\frac{\\sin^2 x + \\cos^2 x}{x - \\frac{24}{61}}",
                                  "\\frac{62}{61x - 24}"));
}

TEST(MathAnswer, BigButBoundedWorkStillDecides) {
  // Too many terms to expand: decided by evaluation instead of normal().
  EXPECT_TRUE(math_answers_equal("(x+y+z+w)^{200}", "(w+x+y+z)^{200}"));
  EXPECT_FALSE(math_answers_equal("(x+y+z+w)^{200}", "(w+x+y+z)^{201}"));
  EXPECT_TRUE(math_answers_equal("2^{100}", "1267650600228229401496703205376"));
  EXPECT_TRUE(math_answers_equal("(x+1)^{60}", "(1+x)^{60}"));
  EXPECT_TRUE(math_answers_equal(std::string(40, '(') + "1" + std::string(40, ')'), "1"));
  // In more than four indeterminates normal()'s gcds take seconds (a fuzzed reply of 800
  // characters in eight symbols and some sines took 2.5 s): decided at points instead.
  EXPECT_EQ(compare_math_answers("\\frac{a+b+c+d+e}{a}", "1+\\frac{b+c+d+e}{a}").detail,
            "numerically equal");
  EXPECT_EQ(compare_math_answers("\\frac{a+b+c+d}{a}", "1+\\frac{b+c+d}{a}").detail,
            "symbolically equal");
  EXPECT_FALSE(math_answers_equal("\\frac{a+b+c+d+e}{a}", "1+\\frac{b+c+d}{a}"));
}

TEST(MathAnswer, ExtractionOfHostileReplies) {
  std::string open_braces = "\\boxed{" + std::string(1 << 20, '{');
  EXPECT_EQ(extract_boxed_answer(open_braces), std::nullopt);
  std::string many_boxes;
  for (int i = 0; i < 100000; ++i) many_boxes += "\\boxed{";
  EXPECT_EQ(extract_boxed_answer(many_boxes), std::nullopt);
  std::string lines(1 << 20, '\n');
  EXPECT_EQ(extract_boxed_answer(lines), std::nullopt);
  EXPECT_EQ(extract_boxed_answer("\\boxed{\xff\xfe}"), "\xff\xfe");
  // Only the end of a huge reply is read.
  EXPECT_EQ(extract_boxed_answer("\\boxed{1}" + std::string(2 << 20, ' ')), std::nullopt);
  EXPECT_EQ(extract_boxed_answer(std::string(2 << 20, ' ') + "\\boxed{1}"), "1");
}

TEST(MathAnswer, ConcurrentComparisonsAgree) {
  // GiNaC is not thread-safe; compare_math_answers serialises it. Many threads, same verdicts.
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (const Pair& p : kPairs) {
          if (math_answers_equal(p.given, p.expected) != p.equal) ++wrong[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace trellis::env
