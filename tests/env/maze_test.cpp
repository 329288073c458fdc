// The maze environment: generated mazes against an independent breadth-first search, and the
// verifier against valid, wrong, malformed and adversarial walks.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <queue>
#include <string>
#include <vector>

#include "common/error.h"
#include "env/registry.h"
#include "env_test_util.h"

namespace trellis::env {
namespace {

using test::error_of;
using test::expect_zero_scores;
using test::for_each_generated;

Task maze_task(const std::vector<std::string>& grid) {
  Task t;
  t.task_id = "hand";
  t.env = "maze";
  t.verification_info = {{"grid", grid}};
  return t;
}

Score walk(const Environment& env, const Task& t, const std::string& moves) {
  return env.score(t, "<answer>" + moves + "</answer>");
}

std::pair<int, int> find(const std::vector<std::string>& grid, char letter) {
  for (int r = 0; r < static_cast<int>(grid.size()); ++r) {
    const auto c = grid[r].find(letter);
    if (c != std::string::npos) return {r, static_cast<int>(c)};
  }
  return {-1, -1};
}

// Independent of the environment: BFS distance from S to G (-1 when cut off).
int bfs_distance(const std::vector<std::string>& grid) {
  const auto start = find(grid, 'S'), goal = find(grid, 'G');
  std::map<std::pair<int, int>, int> dist = {{start, 0}};
  std::queue<std::pair<int, int>> queue;
  queue.push(start);
  while (!queue.empty()) {
    const auto [r, c] = queue.front();
    queue.pop();
    if (std::make_pair(r, c) == goal) return dist[goal];
    for (const auto& [dr, dc] : {std::pair{1, 0}, {-1, 0}, {0, 1}, {0, -1}}) {
      const int nr = r + dr, nc = c + dc;
      if (nr < 0 || nc < 0 || nr >= static_cast<int>(grid.size()) ||
          nc >= static_cast<int>(grid[0].size()) || grid[nr][nc] == '#' || dist.count({nr, nc})) {
        continue;
      }
      dist[{nr, nc}] = dist[{r, c}] + 1;
      queue.push({nr, nc});
    }
  }
  return -1;
}

std::vector<std::string> grid_of(const Task& t) {
  return t.verification_info["grid"].get<std::vector<std::string>>();
}

std::string moves_of(const std::string& solution) {
  const auto begin = solution.find("<answer>") + 8;
  return solution.substr(begin, solution.find("</answer>") - begin);
}

TEST(Maze, GeneratedSolutionsAreShortestWalksAndScoreOne) {
  const auto env = make_environment("maze");
  for_each_generated(*env, 20, [](const Task& t) {
    const auto grid = grid_of(t);
    EXPECT_EQ(static_cast<int>(moves_of(*t.solution).size()), bfs_distance(grid));

    // A perfect maze is a tree: open cells = open adjacencies + 1.
    int cells = 0, edges = 0;
    for (size_t r = 0; r < grid.size(); ++r) {
      for (size_t c = 0; c < grid[r].size(); ++c) {
        if (grid[r][c] == '#') continue;
        ++cells;
        edges += r + 1 < grid.size() && grid[r + 1][c] != '#';
        edges += c + 1 < grid[r].size() && grid[r][c + 1] != '#';
      }
    }
    EXPECT_EQ(cells, edges + 1);
  });
}

TEST(Maze, DifficultyGrowsTheGridAndIsDeterministic) {
  const auto env = make_environment("maze");
  for (int d = 1; d <= 10; ++d) {
    const auto grid = grid_of(env->generate(7, d));
    EXPECT_EQ(grid.size(), static_cast<size_t>(2 * (d + 2) + 1));
    EXPECT_EQ(grid[0].size(), grid.size());
  }
  EXPECT_GT(moves_of(*env->generate(7, 10).solution).size(),
            moves_of(*env->generate(7, 1).solution).size());
  EXPECT_EQ(task_to_json(env->generate(3, 5)), task_to_json(env->generate(3, 5)));
  EXPECT_NE(env->generate(3, 5).verification_info, env->generate(4, 5).verification_info);
}

// S at (1, 1), G at (1, 3) with a wall between them; the way round goes down, across and up.
const std::vector<std::string> kDetour = {
    "#####",  //
    "#S#G#",  //
    "#...#",  //
    "#####",
};

TEST(Maze, AcceptsAnyValidWalkEndingOnTheGoal) {
  const auto env = make_environment("maze");
  const Task t = maze_task(kDetour);
  env->validate(t, "t");
  EXPECT_EQ(walk(*env, t, "DRRU").reward, 1.0);
  EXPECT_EQ(walk(*env, t, "d, r, r, u").reward, 1.0);
  EXPECT_EQ(walk(*env, t, "D R\nR U").reward, 1.0);
  EXPECT_EQ(walk(*env, t, "DRLRRU").reward, 1.0);  // detours are fine
  EXPECT_EQ(walk(*env, t, "DRRUDU").reward, 1.0);  // passing G and coming back to it
  const Score s = walk(*env, t, "DRRUD");          // passing G and stopping elsewhere
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "the walk ends at (2, 3), not at the goal (1, 3)");
}

TEST(Maze, RejectsWallsLeavingTheGridAndWrongEnds) {
  const auto env = make_environment("maze");
  const Task t = maze_task(kDetour);
  Score s = walk(*env, t, "RR");
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "move 1 (R) walks into a wall at (1, 2)");
  s = walk(*env, t, "DRRUU");
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "move 5 (U) walks into a wall at (0, 3)");
  s = walk(*env, t, "DR");
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "the walk ends at (2, 2), not at the goal (1, 3)");

  // A grid without a border: the walk can try to step off it.
  const Task open = maze_task({"S.G"});
  s = walk(*env, open, "U");
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "move 1 (U) leaves the grid from (0, 0)");
  s = walk(*env, open, "RRR");
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "move 3 (R) leaves the grid from (0, 2)");
  EXPECT_EQ(walk(*env, open, "RR").reward, 1.0);

  // The generated solution with one move changed never scores.
  const Task g = env->generate(11, 6);
  std::string moves = moves_of(*g.solution);
  moves[moves.size() / 2] = moves[moves.size() / 2] == 'U' ? 'D' : 'U';
  EXPECT_EQ(walk(*env, g, moves).reward, 0.0);
  EXPECT_EQ(walk(*env, g, moves_of(*g.solution).substr(1)).reward, 0.0);
}

TEST(Maze, MalformedAndHugeAnswersScoreZeroWithoutThrowing) {
  const auto env = make_environment("maze");
  const Task t = env->generate(2, 10);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"DRRU", "no <answer>"},
      {"<answer>DRRU", "no <answer>"},
      {"<answer></answer>", "no moves"},
      {"<answer> , , </answer>", "no moves"},
      {"<answer>up down</answer>", "unexpected character 'p'"},
      {"<answer>D;R</answer>", "unexpected character ';'"},
      {"<answer>D\xc3\xa9</answer>", "byte 0xc3"},
      // 1 MB of moves: rejected on length, without walking them.
      {"<answer>" + std::string(1 << 20, 'U') + "</answer>", "too long"},
      // Within the text bound but past the move limit (4 per cell of a 25x25 grid).
      {"<answer>" + std::string(2501, 'U') + "</answer>", "more than the limit of 2500"},
  };
  expect_zero_scores(*env, t, cases);
  // The last answer counts.
  EXPECT_EQ(env->score(t, "<answer>U</answer> no: " + *t.solution).reward, 1.0);
  EXPECT_EQ(env->score(t, *t.solution + " no: <answer>U</answer>").reward, 0.0);
  // A task that does not parse scores 0 instead of throwing.
  EXPECT_EQ(env->score(maze_task({}), "<answer>U</answer>").reward, 0.0);
}

TEST(Maze, ExplicitEndpointsReplaceOrMustMatchTheLetters) {
  const auto env = make_environment("maze");
  Task t = maze_task({"#####", "#...#", "#.#.#", "#####"});
  t.verification_info["start"] = {1, 1};
  t.verification_info["goal"] = {2, 3};
  env->validate(t, "t");
  EXPECT_EQ(walk(*env, t, "RRD").reward, 1.0);
  t = maze_task(kDetour);
  t.verification_info["goal"] = {1, 3};
  EXPECT_NO_THROW(env->validate(t, "t"));
  t.verification_info["goal"] = {2, 3};
  EXPECT_NE(error_of([&] { env->validate(t, "t"); }).find("disagrees with the 'G'"),
            std::string::npos);
}

TEST(Maze, ValidateNamesTheFault) {
  const auto env = make_environment("maze");
  auto check = [&](const Json& info) {
    return test::validation_error(*env, info, "mazes.jsonl:9");
  };
  auto grid = [](std::vector<std::string> rows) { return Json{{"grid", rows}}; };
  EXPECT_NE(check(Json::object()).find("missing field 'grid'"), std::string::npos);
  EXPECT_NE(check(grid({})).find("1 to 256 rows"), std::string::npos);
  EXPECT_NE(check(grid({"S.G", ".."})).find("row 1 has 2 characters"), std::string::npos);
  EXPECT_NE(check(grid({"S.G", ".x."})).find("row 1 holds 'x'"), std::string::npos);
  EXPECT_NE(check(grid({"..G"})).find("no 'S'"), std::string::npos);
  EXPECT_NE(check(grid({"S.S.G"})).find("more than one 'S'"), std::string::npos);
  EXPECT_NE(check(grid({"S..."})).find("no 'G'"), std::string::npos);
  const std::string cut = check(grid({"S#G"}));
  EXPECT_NE(cut.find("cannot be reached"), std::string::npos);
  EXPECT_NE(cut.find("mazes.jsonl:9"), std::string::npos);
  EXPECT_NE(check({{"grid", {"S..", "..."}}, {"goal", {5, 0}}}).find("outside the grid"),
            std::string::npos);
  EXPECT_NE(check({{"grid", {"S.#", "..."}}, {"goal", {0, 2}}}).find("is a wall"),
            std::string::npos);
  EXPECT_NE(check({{"grid", {"S..", "..."}}, {"goal", {0, 0}}}).find("start is the goal"),
            std::string::npos);
  EXPECT_EQ(check(grid({"S.G", "..."})), "");
}

}  // namespace
}  // namespace trellis::env
