// The sudoku environment: generated puzzles against an independent brute-force solver, and the
// verifier against valid, wrong, malformed and adversarial grids.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "env/registry.h"
#include "env_test_util.h"

namespace trellis::env {
namespace {

using test::expect_zero_scores;
using test::for_each_generated;

Task puzzle_task(int size, const std::string& puzzle) {
  Task t;
  t.task_id = "hand";
  t.env = "sudoku";
  t.verification_info = {{"size", size}, {"puzzle", puzzle}};
  return t;
}

std::string answer(const std::string& body) { return "<answer>\n" + body + "\n</answer>"; }

// Independent of the environment's solver: plain backtracking on the first blank, checking each
// rule by scanning. Fills `grid` with the first solution; returns how many exist, up to `limit`.
bool allowed(const std::vector<int>& g, int n, int i, int v) {
  const int b = n == 4 ? 2 : 3, r = i / n, c = i % n;
  for (int k = 0; k < n; ++k) {
    if (g[r * n + k] == v || g[k * n + c] == v) return false;
    const int br = r / b * b + k / b, bc = c / b * b + k % b;
    if (g[br * n + bc] == v) return false;
  }
  return true;
}

int brute_force(std::vector<int>& g, int n, int limit, std::vector<int>* first) {
  int i = 0;
  while (i < n * n && g[i] != 0) ++i;
  if (i == n * n) {
    if (first != nullptr && first->empty()) *first = g;
    return 1;
  }
  int found = 0;
  for (int v = 1; v <= n && found < limit; ++v) {
    if (!allowed(g, n, i, v)) continue;
    g[i] = v;
    found += brute_force(g, n, limit - found, first);
    g[i] = 0;
  }
  return found;
}

std::vector<int> cells_of(const std::string& puzzle) {
  std::vector<int> g;
  for (char ch : puzzle) g.push_back(ch == '.' || ch == '0' ? 0 : ch - '0');
  return g;
}

std::string rows_of(const std::vector<int>& g, int n, const std::string& sep = "\n") {
  std::string out;
  for (int i = 0; i < n * n; ++i) {
    if (i > 0 && i % n == 0) out += sep;
    out += static_cast<char>('0' + g[i]);
  }
  return out;
}

int givens(const Task& t) {
  int count = 0;
  for (char ch : t.verification_info["puzzle"].get<std::string>()) count += ch != '.';
  return count;
}

TEST(Sudoku, GeneratedSolutionsScoreOneAndPuzzlesAreUnique) {
  const auto env = make_environment("sudoku");
  for_each_generated(*env, 12, [&](const Task& t) {
    // The brute force finds the same single solution, and the verifier accepts it.
    const int n = t.verification_info["size"];
    std::vector<int> g = cells_of(t.verification_info["puzzle"]);
    std::vector<int> first;
    EXPECT_EQ(brute_force(g, n, 2, &first), 1);
    EXPECT_EQ(env->score(t, answer(rows_of(first, n))).reward, 1.0);
    EXPECT_NE(t.solution->find(rows_of(first, n)), std::string::npos);
  });
}

TEST(Sudoku, DifficultySetsSizeAndGivens) {
  const auto env = make_environment("sudoku");
  for (uint64_t seed = 0; seed < 8; ++seed) {
    for (int d = 1; d <= 3; ++d) EXPECT_EQ(env->generate(seed, d).verification_info["size"], 4);
    for (int d = 4; d <= 10; ++d) EXPECT_EQ(env->generate(seed, d).verification_info["size"], 9);
    EXPECT_GT(givens(env->generate(seed, 1)), givens(env->generate(seed, 3)));
    EXPECT_EQ(givens(env->generate(seed, 4)), 46);
    EXPECT_GT(givens(env->generate(seed, 5)), givens(env->generate(seed, 10)));
    EXPECT_LE(givens(env->generate(seed, 10)), 30);
  }
}

TEST(Sudoku, GenerationIsDeterministic) {
  const auto env = make_environment("sudoku");
  const Task a = env->generate(42, 7), b = env->generate(42, 7), c = env->generate(43, 7);
  EXPECT_EQ(task_to_json(a), task_to_json(b));
  EXPECT_NE(a.verification_info, c.verification_info);
  EXPECT_NE(a.task_id, c.task_id);
  EXPECT_NE(a.prompt.find("9x9"), std::string::npos);
}

TEST(Sudoku, AcceptsAnyValidGridThatKeepsTheGivens) {
  const auto env = make_environment("sudoku");
  // No givens: every valid grid is right, not only one stored solution.
  const Task empty = puzzle_task(4, "................");
  env->validate(empty, "t");
  EXPECT_EQ(env->score(empty, answer("1234\n3412\n2143\n4321")).reward, 1.0);
  EXPECT_EQ(env->score(empty, answer("2143\n4321\n1234\n3412")).reward, 1.0);
  // Separators and layouts: '|', spaces, drawn box lines, one line of digits, '0' blanks in the
  // puzzle.
  const Task t = puzzle_task(4, "1.3.0.1.2.4.0.2.");
  env->validate(t, "t");
  EXPECT_EQ(env->score(t, answer("12 | 34\n34 | 12\n-----+-----\n21 | 43\n43 | 21")).reward, 1.0);
  EXPECT_EQ(env->score(t, "<answer>1234341221434321</answer>").reward, 1.0);
  EXPECT_EQ(env->score(t, "<answer>1,2,3,4, 3,4,1,2, 2,1,4,3, 4,3,2,1</answer>").reward, 1.0);
}

TEST(Sudoku, RejectsRuleBreakingGrids) {
  const auto env = make_environment("sudoku");
  const Task empty4 = puzzle_task(4, "................");
  // A Latin square: rows and columns hold every digit, but the top-left box has two 2s.
  Score s = env->score(empty4, answer("1234\n2341\n3412\n4123"));
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "box 1 has two 2s");
  // The same for 9x9: the cyclic Latin square breaks only box rules.
  std::vector<int> latin(81);
  for (int i = 0; i < 81; ++i) latin[i] = (i / 9 + i % 9) % 9 + 1;
  const Task empty9 = puzzle_task(9, std::string(81, '.'));
  s = env->score(empty9, answer(rows_of(latin, 9)));
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_NE(s.reason.find("box"), std::string::npos) << s.reason;
  // Row and column duplicates.
  s = env->score(empty4, answer("1231\n3412\n2143\n4324"));
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "row 1 has two 1s");
  s = env->score(empty4, answer("1234\n3412\n1234\n3412"));
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "column 1 has two 1s");
}

TEST(Sudoku, RejectsAGridThatChangesAGiven) {
  const auto env = make_environment("sudoku");
  const Task t = env->generate(5, 6);
  std::vector<int> g = cells_of(t.verification_info["puzzle"]);
  std::vector<int> solved;
  ASSERT_EQ(brute_force(g, 9, 1, &solved), 1);
  // Swapping two digits everywhere keeps the grid valid but changes the givens that hold them.
  std::vector<int> swapped = solved;
  for (int& v : swapped) v = v == 1 ? 2 : v == 2 ? 1 : v;
  const Score s = env->score(t, answer(rows_of(swapped, 9)));
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_NE(s.reason.find("changes the given"), std::string::npos) << s.reason;
  // And the verifier does accept the swapped grid where no givens constrain it.
  EXPECT_EQ(env->score(puzzle_task(9, std::string(81, '.')), answer(rows_of(swapped, 9))).reward,
            1.0);
}

TEST(Sudoku, MalformedAnswersScoreZeroWithoutThrowing) {
  const auto env = make_environment("sudoku");
  const Task t = puzzle_task(4, "................");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1234\n3412\n2143\n4321", "no <answer>"},
      {"<answer>1234", "no <answer>"},
      {"<answer></answer>", "empty"},
      {"<answer>I cannot solve this</answer>", "unexpected character 'I'"},
      {"<answer>123\n341\n214</answer>", "9 cells; a 4x4 grid has 16"},
      {"<answer>" + std::string(81, '1') + "</answer>", "81 cells"},
      {"<answer>1.34\n3412\n2143\n4321</answer>", "is empty"},
      {"<answer>1234\n3412\n2143\n4329</answer>", "outside 1-4"},
      {"<answer>12\xff"
       "4</answer>",
       "byte 0xff"},
      {"<answer>" + std::string(1 << 20, '1') + "</answer>", "too long"},
  };
  expect_zero_scores(*env, t, cases);
  // The last answer counts: a wrong draft before the right one is fine, not the other way round.
  const Task generated = env->generate(1, 2);
  const std::string good = *generated.solution;
  EXPECT_EQ(env->score(generated, "<answer>1111</answer> then " + good).reward, 1.0);
  EXPECT_EQ(env->score(generated, good + " no wait <answer>1111</answer>").reward, 0.0);
}

TEST(Sudoku, InvalidTasksScoreZero) {
  const auto env = make_environment("sudoku");
  Task t;
  t.verification_info = {{"size", 4}};
  EXPECT_EQ(env->score(t, "<answer>1234341221434321</answer>").reward, 0.0);
}

TEST(Sudoku, ValidateNamesTheFault) {
  const auto env = make_environment("sudoku");
  auto check = [&](const Json& info) { return test::validation_error(*env, info, "data.jsonl:3"); };
  EXPECT_NE(check({{"puzzle", "................"}}).find("missing field 'size'"),
            std::string::npos);
  EXPECT_NE(check({{"size", 5}, {"puzzle", std::string(25, '.')}}).find("4 or 9"),
            std::string::npos);
  EXPECT_NE(check({{"size", 4}, {"puzzle", "..."}}).find("16 characters"), std::string::npos);
  EXPECT_NE(check({{"size", 4}, {"puzzle", "5..............."}}).find("digit 1-4"),
            std::string::npos);
  EXPECT_NE(check({{"size", 4}, {"puzzle", "x..............."}}).find("character 0"),
            std::string::npos);
  EXPECT_NE(check({{"size", 4}, {"puzzle", "1..1............"}}).find("row 1 has two 1s"),
            std::string::npos);
  EXPECT_NE(check({{"size", 4}, {"puzzle", "1....1.........."}}).find("box 1 has two 1s"),
            std::string::npos);
  // Consistent givens with no solution: the top-left cell can hold neither 1, 2, 3 nor 4.
  const std::string stuck = check({{"size", 4}, {"puzzle", ".12.3...4......."}});
  EXPECT_NE(stuck.find("no solution"), std::string::npos) << stuck;
  EXPECT_NE(stuck.find("data.jsonl:3"), std::string::npos);
  EXPECT_NE(check(Json::array()).find("must be an object"), std::string::npos);
  EXPECT_EQ(check({{"size", 9}, {"puzzle", std::string(81, '0')}}), "");
}

}  // namespace
}  // namespace trellis::env
