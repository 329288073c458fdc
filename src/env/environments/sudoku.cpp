// The sudoku environment: fill a 4x4 or 9x9 grid so that every row, column and box holds each
// digit exactly once, keeping the givens (a Ring-1T logic family).
//
// verification_info: {"size": 4 | 9, "puzzle": "<size² characters: digits 1..size for givens,
// '.' or '0' for blanks, row by row>"}. Any full valid grid that keeps the givens scores 1, even
// when a dataset puzzle has several solutions: the verifier checks the rules, not one stored grid.
// Generated puzzles are unique all the same (a solution counter bounded at 2 guards every removal).
//
// The answer is the grid inside <answer></answer>: its digits row by row; whitespace, '|', ',',
// '-' and '+' are ignored so that rows per line, one line of 81 digits, or a drawn grid all parse.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
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

// A 9x9 grid with separators is under 300 characters; anything far longer is not a grid.
constexpr size_t kMaxAnswerChars = 4096;

// Givens left by the generator per difficulty: 1-3 are 4x4 puzzles, 4-10 are 9x9. Removal stops
// earlier when taking any further given would make the solution ambiguous.
constexpr std::array<int, 11> kTargetGivens = {0, 10, 8, 6, 46, 40, 35, 31, 28, 26, 24};

int box_side(int size) { return size == 4 ? 2 : 3; }
int box_of(int size, int row, int col) {
  const int b = box_side(size);
  return (row / b) * b + col / b;
}

// A grid: size x size cells row by row, 0 for a blank.
struct Sudoku {
  int size = 0;
  std::vector<int> cells;
};

// The first rule the filled cells of `grid` break ("row 3 has two 5s"; 1-based), or none.
std::optional<std::string> first_conflict(const Sudoku& grid) {
  const int n = grid.size;
  std::vector<uint32_t> rows(n), cols(n), boxes(n);
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) {
      const int v = grid.cells[r * n + c];
      if (v == 0) continue;
      const uint32_t bit = 1u << v;
      const int b = box_of(n, r, c);
      if (rows[r] & bit) return fmt::format("row {} has two {}s", r + 1, v);
      if (cols[c] & bit) return fmt::format("column {} has two {}s", c + 1, v);
      if (boxes[b] & bit) return fmt::format("box {} has two {}s", b + 1, v);
      rows[r] |= bit;
      cols[c] |= bit;
      boxes[b] |= bit;
    }
  }
  return std::nullopt;
}

// Backtracking over candidate bitmasks, always branching on the blank with the fewest candidates,
// which solves or refutes any 9x9 grid in milliseconds. The givens must not conflict.
class Solver {
 public:
  explicit Solver(const Sudoku& grid)
      : n_(grid.size), cells_(grid.cells), rows_(n_), cols_(n_), boxes_(n_) {
    for (int i = 0; i < n_ * n_; ++i) {
      if (cells_[i] != 0) mark(i, cells_[i]);
    }
  }

  // The number of solutions, counting no further than `limit`. With `rng`, digits are tried in
  // random order, so the first solution is a random full grid (the generator's use).
  int count(int limit, RandomStream* rng = nullptr) {
    found_ = 0;
    limit_ = limit;
    rng_ = rng;
    search();
    return found_;
  }
  const std::vector<int>& first_solution() const { return first_; }

 private:
  void mark(int i, int v) {
    const uint32_t bit = 1u << v;
    rows_[i / n_] ^= bit;
    cols_[i % n_] ^= bit;
    boxes_[box_of(n_, i / n_, i % n_)] ^= bit;
  }
  uint32_t candidates(int i) const {
    const uint32_t all = ((1u << (n_ + 1)) - 1) & ~1u;
    return all & ~(rows_[i / n_] | cols_[i % n_] | boxes_[box_of(n_, i / n_, i % n_)]);
  }

  void search() {
    int best = -1;
    uint32_t best_mask = 0;
    for (int i = 0; i < n_ * n_; ++i) {
      if (cells_[i] != 0) continue;
      const uint32_t mask = candidates(i);
      if (mask == 0) return;  // a dead end
      if (best < 0 || std::popcount(mask) < std::popcount(best_mask)) {
        best = i;
        best_mask = mask;
      }
    }
    if (best < 0) {
      if (found_++ == 0) first_ = cells_;
      return;
    }
    std::vector<int> digits;
    for (int v = 1; v <= n_; ++v) {
      if (best_mask & (1u << v)) digits.push_back(v);
    }
    if (rng_ != nullptr) rng_->shuffle(digits.begin(), digits.end());
    for (int v : digits) {
      cells_[best] = v;
      mark(best, v);
      search();
      mark(best, v);
      cells_[best] = 0;
      if (found_ >= limit_) return;
    }
  }

  int n_;
  std::vector<int> cells_;
  std::vector<uint32_t> rows_, cols_, boxes_;
  std::vector<int> first_;
  int found_ = 0;
  int limit_ = 1;
  RandomStream* rng_ = nullptr;
};

// The puzzle of a task's verification_info; Error naming `where` and the field.
Sudoku parse_puzzle(const Json& info, const std::string& where) {
  if (!info.is_object()) fail(where, "verification_info must be an object");
  const int size = json_required<int>(info, "size", where);
  if (size != 4 && size != 9) fail(where, "verification_info.size must be 4 or 9, got {}", size);
  const auto text = json_required<std::string>(info, "puzzle", where);
  if (text.size() != static_cast<size_t>(size * size)) {
    fail(where, "verification_info.puzzle must have {} characters for a {}x{} grid, got {}",
         size * size, size, size, text.size());
  }
  Sudoku puzzle{size, std::vector<int>(size * size, 0)};
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '.' || ch == '0') continue;
    if (ch < '1' || ch > '0' + size) {
      fail(where, "verification_info.puzzle character {} must be a digit 1-{}, '.' or '0'", i,
           size);
    }
    puzzle.cells[i] = ch - '0';
  }
  return puzzle;
}

// A character for a one-line reason: itself when printable ASCII, else its byte value.
std::string describe_char(char ch) {
  const auto byte = static_cast<unsigned char>(ch);
  if (byte > 0x20 && byte < 0x7f) return fmt::format("'{}'", ch);
  return fmt::format("byte 0x{:02x}", byte);
}

std::string grid_rows(const Sudoku& grid) {
  std::string out;
  for (int r = 0; r < grid.size; ++r) {
    for (int c = 0; c < grid.size; ++c)
      out += static_cast<char>('0' + grid.cells[r * grid.size + c]);
    out += '\n';
  }
  return out;
}

// The puzzle as a human would draw it: blanks as '.', boxes set apart by '|' and '-' lines.
std::string drawn_puzzle(const Sudoku& grid) {
  const int n = grid.size, b = box_side(n);
  std::vector<std::string> rows;
  for (int r = 0; r < n; ++r) {
    std::string row;
    for (int c = 0; c < n; ++c) {
      if (c > 0) row += c % b == 0 ? " | " : " ";
      const int v = grid.cells[r * n + c];
      row += v == 0 ? '.' : static_cast<char>('0' + v);
    }
    rows.push_back(row);
  }
  std::string rule = rows[0];  // the line between bands: '-' with '+' where a '|' crosses it
  for (char& ch : rule) ch = ch == '|' ? '+' : '-';
  std::string out;
  for (int r = 0; r < n; ++r) {
    if (r > 0 && r % b == 0) out += rule + '\n';
    out += rows[r] + '\n';
  }
  return out;
}

Score score_grid(const Sudoku& puzzle, std::string_view completion) {
  const auto answer = last_tagged(completion);
  if (!answer) return {0, "no <answer>...</answer> block"};
  if (answer->empty()) return {0, "the answer is empty"};
  if (answer->size() > kMaxAnswerChars) {
    return {0, fmt::format("answer too long ({} characters)", answer->size())};
  }
  const int n = puzzle.size;
  Sudoku grid{n, {}};
  for (const char ch : *answer) {
    if (ch >= '0' && ch <= '9') {
      grid.cells.push_back(ch - '0');
    } else if (ch == '.') {
      grid.cells.push_back(0);
    } else if (ch == '|' || ch == ',' || ch == '-' || ch == '+' || ch == ' ' || ch == '\t' ||
               ch == '\n' || ch == '\r') {
      continue;
    } else {
      return {0, fmt::format("unexpected character {} in the grid", describe_char(ch))};
    }
  }
  if (grid.cells.size() != static_cast<size_t>(n * n)) {
    return {0, fmt::format("the answer has {} cells; a {}x{} grid has {}", grid.cells.size(), n, n,
                           n * n)};
  }
  for (int i = 0; i < n * n; ++i) {
    const int r = i / n + 1, c = i % n + 1, v = grid.cells[i], given = puzzle.cells[i];
    if (v == 0) return {0, fmt::format("cell (row {}, column {}) is empty", r, c)};
    if (v > n) {
      return {0, fmt::format("cell (row {}, column {}) holds {}, outside 1-{}", r, c, v, n)};
    }
    if (given != 0 && v != given) {
      return {0,
              fmt::format("cell (row {}, column {}) changes the given {} to {}", r, c, given, v)};
    }
  }
  if (const auto conflict = first_conflict(grid)) return {0, *conflict};
  return {1, "the grid is complete, follows every rule and keeps the givens"};
}

class SudokuEnvironment final : public Environment {
 public:
  std::string name() const override { return "sudoku"; }
  std::string description() const override {
    return "Sudoku: fill the grid so every row, column and box holds each digit once; difficulty "
           "1-3 are 4x4 with 10/8/6 givens, 4-10 are 9x9 with 46 down to ~24 givens (unique)";
  }
  std::string system_prompt() const override {
    return "You solve sudoku puzzles. Think it through, then give the completed grid inside "
           "<answer></answer> tags, one row per line, digits only. For example, for a 4x4 "
           "puzzle:\n<answer>\n1234\n3412\n2143\n4321\n</answer>";
  }

  Task generate(uint64_t seed, int difficulty) const override {
    check_difficulty(difficulty, "sudoku.generate");
    RandomStream rng(seed, /*stream=*/difficulty);  // unrelated tasks across difficulties
    const int n = difficulty <= 3 ? 4 : 9;
    Solver filler(Sudoku{n, std::vector<int>(n * n, 0)});
    filler.count(1, &rng);
    const Sudoku full{n, filler.first_solution()};

    // Blank cells in random order, keeping each blank only if the solution stays unique.
    Sudoku puzzle = full;
    std::vector<int> order(n * n);
    for (int i = 0; i < n * n; ++i) order[i] = i;
    rng.shuffle(order.begin(), order.end());
    int givens = n * n;
    for (const int i : order) {
      if (givens <= kTargetGivens[difficulty]) break;
      puzzle.cells[i] = 0;
      if (Solver(puzzle).count(2) == 1) {
        --givens;
      } else {
        puzzle.cells[i] = full.cells[i];
      }
    }

    Task task = generated_task(*this, seed, difficulty);
    std::string text;
    for (const int v : puzzle.cells) text += v == 0 ? '.' : static_cast<char>('0' + v);
    task.verification_info = {{"size", n}, {"puzzle", text}};
    task.prompt = fmt::format(
        "Solve this {0}x{0} sudoku: replace every '.' with a digit from 1 to {0} so that each "
        "row, each column and each {1}x{1} box contains every digit exactly once. Keep the given "
        "digits.\n\n{2}",
        n, box_side(n), drawn_puzzle(puzzle));
    task.solution = "<answer>\n" + grid_rows(full) + "</answer>";
    return task;
  }

  void validate(const Task& task, const std::string& where) const override {
    const Sudoku puzzle = parse_puzzle(task.verification_info, where);
    if (const auto conflict = first_conflict(puzzle)) {
      fail(where, "verification_info.puzzle breaks the rules in its givens: {}", *conflict);
    }
    if (Solver(puzzle).count(1) == 0) fail(where, "verification_info.puzzle has no solution");
  }

  Score score(const Task& task, std::string_view completion) const override {
    try {
      return score_grid(parse_puzzle(task.verification_info, task.task_id), completion);
    } catch (const std::exception& e) {
      return {0, fmt::format("invalid task: {}", e.what())};
    }
  }
};

}  // namespace

std::unique_ptr<Environment> make_sudoku_environment() {
  return std::make_unique<SudokuEnvironment>();
}

}  // namespace trellis::env
