// The maze environment: walk from S to G through a grid maze with moves U, D, L, R (a Ring-1T
// logic family).
//
// verification_info: {"grid": ["#######", "#S..#.#", ...]} with '#' walls, '.' open cells, one
// 'S' (start) and one 'G' (goal); optional "start" / "goal" as [row, column] (0-based) replace or
// must agree with the letters. Any valid walk scores 1, not only the shortest: every move must stay
// on the grid and off the walls, and the walk must END on the goal (passing G earlier and coming
// back is fine; passing it and stopping elsewhere is not). Walks longer than 4 moves per cell of
// the grid score 0 without being simulated.
//
// The answer inside <answer></answer> is the letters U, D, L, R (either case); spaces, newlines
// and commas between them are ignored. Generated mazes are perfect (one path between any two
// cells), carved by a randomized depth-first search; the goal is the room farthest from the start.
#include <algorithm>
#include <array>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/rng.h"
#include "env/answer_extraction.h"
#include "env/environments/environments.h"

namespace trellis::env {
namespace {

constexpr int kMaxSide = 256;     // rows and columns a dataset maze may have
constexpr int kMovesPerCell = 4;  // the longest accepted walk, per cell of the grid
constexpr size_t kSlackChars = 1024;

struct Cell {
  int row = 0, col = 0;
  bool operator==(const Cell&) const = default;
};

struct Maze {
  std::vector<std::string> rows;
  Cell start, goal;
  int height() const { return static_cast<int>(rows.size()); }
  int width() const { return static_cast<int>(rows[0].size()); }
  int cells() const { return height() * width(); }
  bool inside(Cell c) const {
    return c.row >= 0 && c.row < height() && c.col >= 0 && c.col < width();
  }
  bool open(Cell c) const { return inside(c) && rows[c.row][c.col] != '#'; }
};

struct Move {
  char letter;
  int drow, dcol;
};
constexpr std::array<Move, 4> kMoves = {{{'U', -1, 0}, {'D', 1, 0}, {'L', 0, -1}, {'R', 0, 1}}};

// Breadth-first search from the start: for each cell (row by row), the index of the move that
// first reached it (-1 for the start and for cells cut off) and its distance in moves (-1 when
// cut off).
struct Reach {
  std::vector<int> via, distance;
};

Reach reach_from_start(const Maze& maze) {
  const int w = maze.width();
  Reach reach{std::vector<int>(maze.cells(), -1), std::vector<int>(maze.cells(), -1)};
  std::deque<Cell> queue = {maze.start};
  reach.distance[maze.start.row * w + maze.start.col] = 0;
  while (!queue.empty()) {
    const Cell at = queue.front();
    queue.pop_front();
    for (int m = 0; m < 4; ++m) {
      const Cell next{at.row + kMoves[m].drow, at.col + kMoves[m].dcol};
      if (!maze.open(next) || reach.distance[next.row * w + next.col] >= 0) continue;
      reach.distance[next.row * w + next.col] = reach.distance[at.row * w + at.col] + 1;
      reach.via[next.row * w + next.col] = m;
      queue.push_back(next);
    }
  }
  return reach;
}

// The shortest walk from start to goal as move letters, or none when the goal is cut off.
std::optional<std::string> shortest_path(const Maze& maze) {
  const int w = maze.width();
  const Reach reach = reach_from_start(maze);
  if (reach.distance[maze.goal.row * w + maze.goal.col] < 0) return std::nullopt;
  std::string path;
  for (Cell at = maze.goal; !(at == maze.start);) {
    const Move& m = kMoves[reach.via[at.row * w + at.col]];
    path += m.letter;
    at = {at.row - m.drow, at.col - m.dcol};
  }
  std::reverse(path.begin(), path.end());
  return path;
}

// One endpoint: the cell marked `letter`, or the [row, column] field `key`, which must agree.
Cell endpoint(const Json& info, const std::vector<std::string>& rows, char letter, const char* key,
              const std::string& where) {
  std::optional<Cell> marked;
  for (int r = 0; r < static_cast<int>(rows.size()); ++r) {
    for (int c = 0; c < static_cast<int>(rows[r].size()); ++c) {
      if (rows[r][c] != letter) continue;
      if (marked) fail(where, "verification_info.grid has more than one '{}'", letter);
      marked = Cell{r, c};
    }
  }
  if (!info.contains(key) || info.at(key).is_null()) {
    if (!marked)
      fail(where, "verification_info.grid has no '{}' and there is no '{}' field", letter, key);
    return *marked;
  }
  const auto pos = json_required<std::vector<int>>(info, key, where);
  if (pos.size() != 2) fail(where, "verification_info.{} must be [row, column]", key);
  const Cell given{pos[0], pos[1]};
  if (given.row < 0 || given.row >= static_cast<int>(rows.size()) || given.col < 0 ||
      given.col >= static_cast<int>(rows[0].size())) {
    fail(where, "verification_info.{} ({}, {}) is outside the grid", key, given.row, given.col);
  }
  if (rows[given.row][given.col] == '#') {
    fail(where, "verification_info.{} ({}, {}) is a wall", key, given.row, given.col);
  }
  if (marked && !(*marked == given)) {
    fail(where, "verification_info.{} ({}, {}) disagrees with the '{}' at ({}, {})", key, given.row,
         given.col, letter, marked->row, marked->col);
  }
  return given;
}

// The maze of a task's verification_info; Error naming `where` and the field.
Maze parse_maze(const Json& info, const std::string& where) {
  if (!info.is_object()) fail(where, "verification_info must be an object");
  Maze maze;
  maze.rows = json_required<std::vector<std::string>>(info, "grid", where);
  if (maze.rows.empty() || maze.rows.size() > static_cast<size_t>(kMaxSide)) {
    fail(where, "verification_info.grid must have 1 to {} rows, got {}", kMaxSide,
         maze.rows.size());
  }
  const size_t width = maze.rows[0].size();
  if (width == 0 || width > static_cast<size_t>(kMaxSide)) {
    fail(where, "verification_info.grid rows must have 1 to {} characters, got {}", kMaxSide,
         width);
  }
  for (size_t r = 0; r < maze.rows.size(); ++r) {
    if (maze.rows[r].size() != width) {
      fail(where, "verification_info.grid row {} has {} characters, row 0 has {}", r,
           maze.rows[r].size(), width);
    }
    for (const char ch : maze.rows[r]) {
      if (ch != '#' && ch != '.' && ch != 'S' && ch != 'G') {
        fail(where, "verification_info.grid row {} holds '{}'; cells are '#', '.', 'S' or 'G'", r,
             ch);
      }
    }
  }
  maze.start = endpoint(info, maze.rows, 'S', "start", where);
  maze.goal = endpoint(info, maze.rows, 'G', "goal", where);
  if (maze.start == maze.goal) fail(where, "verification_info: the start is the goal");
  return maze;
}

std::string describe_char(char ch) {
  const auto byte = static_cast<unsigned char>(ch);
  if (byte > 0x20 && byte < 0x7f) return fmt::format("'{}'", ch);
  return fmt::format("byte 0x{:02x}", byte);
}

Score score_walk(const Maze& maze, std::string_view completion) {
  const auto answer = last_tagged(completion);
  if (!answer) return {0, "no <answer>...</answer> block"};
  const size_t max_moves = static_cast<size_t>(kMovesPerCell) * maze.cells();
  // Separators may take a few characters per move; far more text than that is not a walk.
  if (answer->size() > 4 * max_moves + kSlackChars) {
    return {0, fmt::format("answer too long ({} characters)", answer->size())};
  }
  std::vector<int> moves;
  for (const char ch : *answer) {
    if (ch == ' ' || ch == ',' || ch == '\n' || ch == '\r' || ch == '\t') continue;
    const char upper = (ch >= 'a' && ch <= 'z') ? static_cast<char>(ch - 'a' + 'A') : ch;
    const auto m = std::find_if(kMoves.begin(), kMoves.end(),
                                [&](const Move& move) { return move.letter == upper; });
    if (m == kMoves.end()) {
      return {0, fmt::format("unexpected character {} in the moves (use U, D, L, R)",
                             describe_char(ch))};
    }
    moves.push_back(static_cast<int>(m - kMoves.begin()));
  }
  if (moves.empty()) return {0, "the answer has no moves"};
  if (moves.size() > max_moves) {
    return {0, fmt::format("{} moves, more than the limit of {} for this grid", moves.size(),
                           max_moves)};
  }
  Cell at = maze.start;
  for (size_t i = 0; i < moves.size(); ++i) {
    const Move& m = kMoves[moves[i]];
    const Cell next{at.row + m.drow, at.col + m.dcol};
    if (!maze.inside(next)) {
      return {0, fmt::format("move {} ({}) leaves the grid from ({}, {})", i + 1, m.letter, at.row,
                             at.col)};
    }
    if (!maze.open(next)) {
      return {0, fmt::format("move {} ({}) walks into a wall at ({}, {})", i + 1, m.letter,
                             next.row, next.col)};
    }
    at = next;
  }
  if (!(at == maze.goal)) {
    return {0, fmt::format("the walk ends at ({}, {}), not at the goal ({}, {})", at.row, at.col,
                           maze.goal.row, maze.goal.col)};
  }
  return {1, fmt::format("the {} moves reach the goal", moves.size())};
}

// A perfect maze of rooms x rooms rooms: rooms sit at odd coordinates of a (2 rooms + 1)-square
// grid, and a randomized depth-first search knocks down the wall between a room and an unvisited
// neighbour until every room is reached, so exactly one path joins any two cells.
std::vector<std::string> carve(int rooms, RandomStream& rng) {
  const int side = 2 * rooms + 1;
  std::vector<std::string> rows(side, std::string(side, '#'));
  std::vector<bool> visited(rooms * rooms, false);
  const int first = static_cast<int>(rng.uniform_int(0, rooms * rooms - 1));
  std::vector<int> stack = {first};
  visited[first] = true;
  rows[2 * (first / rooms) + 1][2 * (first % rooms) + 1] = '.';
  while (!stack.empty()) {
    const int room = stack.back(), r = room / rooms, c = room % rooms;
    std::vector<int> fresh;  // unvisited neighbours, as move indices
    for (int m = 0; m < 4; ++m) {
      const int nr = r + kMoves[m].drow, nc = c + kMoves[m].dcol;
      if (nr >= 0 && nr < rooms && nc >= 0 && nc < rooms && !visited[nr * rooms + nc]) {
        fresh.push_back(m);
      }
    }
    if (fresh.empty()) {
      stack.pop_back();
      continue;
    }
    const Move& m = kMoves[fresh[rng.uniform_int(0, static_cast<int64_t>(fresh.size()) - 1)]];
    const int nr = r + m.drow, nc = c + m.dcol;
    rows[2 * r + 1 + m.drow][2 * c + 1 + m.dcol] = '.';
    rows[2 * nr + 1][2 * nc + 1] = '.';
    visited[nr * rooms + nc] = true;
    stack.push_back(nr * rooms + nc);
  }
  return rows;
}

class MazeEnvironment final : public Environment {
 public:
  std::string name() const override { return "maze"; }
  std::string description() const override {
    return "Maze: give moves U/D/L/R from S to G through a perfect maze; difficulty d carves "
           "(d+2)x(d+2) rooms (a 7x7 grid at 1, 25x25 at 10), the goal farthest from the start";
  }
  std::string system_prompt() const override {
    return "You solve mazes. Think it through, then give your path inside <answer></answer> tags "
           "as a sequence of moves: U (up), D (down), L (left), R (right), for example "
           "<answer>RRDDLD</answer>. Spaces and commas between moves are ignored. Every move must "
           "land on an open cell inside the grid, and the path must end on G.";
  }

  Task generate(uint64_t seed, int difficulty) const override {
    check_difficulty(difficulty, "maze.generate");
    RandomStream rng(seed, /*stream=*/difficulty);  // unrelated tasks across difficulties
    const int rooms = difficulty + 2;
    Maze maze;
    maze.rows = carve(rooms, rng);
    const int start_room = static_cast<int>(rng.uniform_int(0, rooms * rooms - 1));
    maze.start = {2 * (start_room / rooms) + 1, 2 * (start_room % rooms) + 1};

    // The goal: the room farthest from the start (the first in reading order on ties). In a
    // perfect maze the path to it is unique, so that is also its length for the solver.
    const Reach reach = reach_from_start(maze);
    int farthest = 0;
    for (int room = 0; room < rooms * rooms; ++room) {
      const Cell cell{2 * (room / rooms) + 1, 2 * (room % rooms) + 1};
      const int distance = reach.distance[cell.row * maze.width() + cell.col];
      if (distance > farthest) {
        farthest = distance;
        maze.goal = cell;
      }
    }
    maze.rows[maze.start.row][maze.start.col] = 'S';
    maze.rows[maze.goal.row][maze.goal.col] = 'G';

    Task task = generated_task(*this, seed, difficulty);
    task.verification_info = {{"grid", maze.rows}};
    std::string drawing;
    for (const auto& row : maze.rows) drawing += row + '\n';
    task.prompt = fmt::format(
        "Find a path through this maze from S to G. '#' is a wall and '.' is an open cell. Each "
        "move steps one cell up (U), down (D), left (L) or right (R); you may not step onto a "
        "wall or off the grid. Positions are (row, column), counting from 0 at the top-left "
        "corner.\n\n{}",
        drawing);
    task.solution = "<answer>" + *shortest_path(maze) + "</answer>";
    return task;
  }

  void validate(const Task& task, const std::string& where) const override {
    const Maze maze = parse_maze(task.verification_info, where);
    if (!shortest_path(maze)) fail(where, "verification_info.grid: the goal cannot be reached");
  }

  Score score(const Task& task, std::string_view completion) const override {
    try {
      return score_walk(parse_maze(task.verification_info, task.task_id), completion);
    } catch (const std::exception& e) {
      return {0, fmt::format("invalid task: {}", e.what())};
    }
  }
};

}  // namespace

std::unique_ptr<Environment> make_maze_environment() { return std::make_unique<MazeEnvironment>(); }

}  // namespace trellis::env
