// The code environment: write a Python 3 program; it runs in the sandbox (sandbox.h) against the
// task's tests, and the reward is 1 when every test passes, else 0.
//
// verification_info: {"language": "python", "test_cases": [
//     {"type": "stdin_stdout", "input": "1 2\n", "output": "3\n"},   (the program's stdout, given
//                                                                      the input, must match)
//     {"type": "assert", "code": "assert add(2, 3) == 5"}]}          (program + "\n" + code must
//                                                                      exit 0)
// which is the format of INTELLECT-2's code datasets. Outputs are compared after removing trailing
// whitespace from each line and trailing blank lines. The program is the last fenced block of the
// reply (```python, ```py, ```python3 or a bare ```); tests run in order and scoring stops at the
// first failure, whose reason names it ("test 3/5: expected '6', got '5'").
//
// Assert tests of the form `assert <expression> == <literal>` (either side the literal) are not
// run as asserts: `==` inside the program would ask the returned object, whose __eq__ the program
// wrote. A trusted sandboxed run without the program first reads each assert with Python's `ast`
// and encodes the literal (verifiers/python_values.h). Then a harness runs the program, evaluates
// the expression, checks the result's type exactly (`type(x) is int`, ...: no subclass, no custom
// class) and writes its plain encoding to a pipe only the harness's result goes to
// (Sandbox::kChannelFd, not stdout); the expected value never enters that sandbox, and the two are
// compared here. Other asserts (`assert f(x)`, `assert abs(f(x) - y) < 1e-9`, several lines) still
// run inside the program and trust its values.
//
// The generator makes parametric problems (sums, FizzBuzz, brackets, primes, Fibonacci mod m,
// inversions, ...) whose expected outputs come from C++ reference implementations, written
// independently of the Python reference solutions (often brute force where those are clever).
#include <algorithm>
#include <functional>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/rng.h"
#include "env/answer_extraction.h"
#include "env/environments/environments.h"
#include "env/verifiers/python_values.h"

namespace trellis::env {
namespace {

constexpr size_t kMaxProgramBytes = 256 * 1024;
constexpr size_t kMaxTestCases = 1000;
constexpr size_t kQuoteChars = 40;
constexpr int64_t kBillion = 1000000000;

// ---------------------------------------------------------------------------------------------
// Reading replies and comparing outputs

// The body of the last complete fenced code block tagged python/py/python3 or untagged; none when
// there is none. A fence is a line starting (after spaces) with 3 or more backticks; the block ends
// at a line holding only at least as many backticks. One pass over the lines: linear time.
std::optional<std::string_view> last_python_block(std::string_view text) {
  std::optional<std::string_view> found;
  bool inside = false, wanted = false;
  size_t fence = 0, body_start = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    const std::string_view stripped = trim(line);
    const size_t ticks = std::min(stripped.find_first_not_of('`'), stripped.size());
    if (!inside && ticks >= 3 && line.find_first_not_of(' ') == line.find('`')) {
      std::string info(trim(stripped.substr(ticks)));
      info = info.substr(0, info.find_first_of(" \t{"));
      std::transform(info.begin(), info.end(), info.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      inside = true;
      fence = ticks;
      wanted = info.empty() || info == "python" || info == "py" || info == "python3";
      body_start = std::min(end + 1, text.size());
    } else if (inside && ticks >= fence && ticks == stripped.size()) {
      inside = false;
      if (wanted) found = text.substr(body_start, pos - body_start);
    }
    if (end == text.size()) break;
    pos = end + 1;
  }
  return found;
}

// The lines of an output without trailing whitespace, and without trailing blank lines.
std::vector<std::string_view> normalized_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    const auto last = line.find_last_not_of(" \t\r\f\v");
    lines.push_back(last == std::string_view::npos ? std::string_view{} : line.substr(0, last + 1));
    if (end == text.size()) break;
    pos = end + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// `text` for a one-line reason: quoted, printable ASCII, at most kQuoteChars characters.
std::string quoted(std::string_view text) {
  std::string out = "'";
  for (const char c : text.substr(0, kQuoteChars)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (text.size() > kQuoteChars) out += "...";
  return out + "'";
}

// "" when the outputs match; else what differs, e.g. "expected '6', got '5'".
std::string output_difference(std::string_view expected, std::string_view got) {
  const auto want = normalized_lines(expected);
  const auto have = normalized_lines(got);
  const size_t common = std::min(want.size(), have.size());
  size_t i = 0;
  while (i < common && want[i] == have[i]) ++i;
  if (i == want.size() && i == have.size()) return "";
  if (want.size() <= 1 && have.size() <= 1) {
    return fmt::format("expected {}, got {}", quoted(want.empty() ? "" : want[0]),
                       quoted(have.empty() ? "" : have[0]));
  }
  if (i == have.size()) {
    return fmt::format("output ends after line {}; expected line {}: {}", i, i + 1,
                       quoted(want[i]));
  }
  if (i == want.size()) {
    return fmt::format("extra output at line {}: {}", i + 1, quoted(have[i]));
  }
  return fmt::format("line {}: expected {}, got {}", i + 1, quoted(want[i]), quoted(have[i]));
}

struct TestCase {
  bool is_assert = false;
  std::string input, output;  // stdin_stdout
  std::string code;           // assert
};

// The test cases of a task; Error naming `where` and the field at fault.
std::vector<TestCase> test_cases(const Json& info, const std::string& where) {
  if (!info.is_object()) fail(where, "verification_info must be an object");
  const auto language = json_optional<std::string>(info, "language", "python", where);
  if (language != "python") {
    fail(where, "verification_info.language must be \"python\", got \"{}\"", language);
  }
  if (!info.contains("test_cases") || !info.at("test_cases").is_array()) {
    fail(where, "verification_info.test_cases must be an array of test cases");
  }
  const Json& cases = info.at("test_cases");
  if (cases.empty() || cases.size() > kMaxTestCases) {
    fail(where, "verification_info.test_cases must hold 1..{} test cases, got {}", kMaxTestCases,
         cases.size());
  }
  std::vector<TestCase> tests;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string at = fmt::format("{}: verification_info.test_cases[{}]", where, i);
    const auto type = json_required<std::string>(cases[i], "type", at);
    TestCase t;
    if (type == "stdin_stdout") {
      t.input = json_required<std::string>(cases[i], "input", at);
      t.output = json_required<std::string>(cases[i], "output", at);
    } else if (type == "assert") {
      t.is_assert = true;
      t.code = json_required<std::string>(cases[i], "code", at);
      if (trim(t.code).empty()) fail(at, "field 'code' is empty");
    } else {
      fail(at, "field 'type' must be \"stdin_stdout\" or \"assert\", got \"{}\"", type);
    }
    tests.push_back(std::move(t));
  }
  return tests;
}

// ---------------------------------------------------------------------------------------------
// The generator: problem families

// Difficulty d: inputs of up to kSizes[d-1] numbers (or words, lines, matrix cells), 3 + (d-1)/3
// tests, and families unlocked by their minimum difficulty.
constexpr int64_t kSizes[] = {5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};
int64_t size_limit(int difficulty) { return kSizes[difficulty - 1]; }
int test_count(int difficulty) { return 3 + (difficulty - 1) / 3; }

struct Problem {
  std::string family;
  std::string prompt;
  Json tests = Json::array();
  std::string program;  // the reference solution, ending with a newline
};

// Sizes of the tests of a problem: a small first one (the prompt's example), random ones, and
// the largest allowed last.
std::vector<int64_t> test_sizes(RandomStream& rng, int difficulty, int64_t smallest = 1) {
  const int64_t most = std::max(smallest, size_limit(difficulty));
  std::vector<int64_t> sizes;
  const int n = test_count(difficulty);
  for (int i = 0; i < n; ++i) {
    if (i == 0) {
      sizes.push_back(rng.uniform_int(smallest, std::max(smallest, std::min<int64_t>(most, 5))));
    } else if (i == n - 1) {
      sizes.push_back(most);
    } else {
      sizes.push_back(rng.uniform_int(smallest, most));
    }
  }
  return sizes;
}

std::string joined(const std::vector<int64_t>& v, const char* separator = " ") {
  return fmt::format("{}", fmt::join(v, separator));
}
std::string python_list(const std::vector<int64_t>& v) { return "[" + joined(v, ", ") + "]"; }

std::vector<int64_t> random_numbers(RandomStream& rng, int64_t n, int64_t lo, int64_t hi) {
  std::vector<int64_t> v(n);
  for (auto& x : v) x = rng.uniform_int(lo, hi);
  return v;
}

std::string random_word(RandomStream& rng, int64_t length, std::string_view alphabet) {
  std::string w;
  for (int64_t i = 0; i < length; ++i) {
    w += alphabet[rng.uniform_int(0, static_cast<int64_t>(alphabet.size()) - 1)];
  }
  return w;
}

// A stdin/stdout problem: the statement, and tests made from `inputs` by the C++ reference.
Problem stdin_problem(std::string family, std::string statement,
                      const std::vector<std::string>& inputs,
                      const std::function<std::string(const std::string&)>& reference,
                      std::string program) {
  Problem p{std::move(family), "", Json::array(), std::move(program)};
  for (const auto& input : inputs) {
    p.tests.push_back({{"type", "stdin_stdout"}, {"input", input}, {"output", reference(input)}});
  }
  p.prompt = fmt::format(
      "{}\n\nRead the input from standard input and print the answer to standard output.\n\n"
      "Example input:\n{}\nExample output:\n{}",
      statement, p.tests[0]["input"].get<std::string>(), p.tests[0]["output"].get<std::string>());
  return p;
}

// A function problem: tests are `assert <call> == <expected>`.
Problem assert_problem(std::string family, std::string statement,
                       const std::vector<std::pair<std::string, std::string>>& calls,
                       std::string program) {
  Problem p{std::move(family), "", Json::array(), std::move(program)};
  for (const auto& [call, expected] : calls) {
    p.tests.push_back(
        {{"type", "assert"}, {"code", fmt::format("assert {} == {}", call, expected)}});
  }
  p.prompt = fmt::format("{}\n\nExample: {} == {}", statement, calls[0].first, calls[0].second);
  return p;
}

// Reads whitespace-separated integers (the references parse the inputs they were given).
std::vector<int64_t> integers_of(const std::string& text) {
  std::vector<int64_t> v;
  size_t pos = 0;
  while ((pos = text.find_first_of("-0123456789", pos)) != std::string::npos) {
    size_t used = 0;
    v.push_back(std::stoll(text.substr(pos), &used));
    pos += used;
  }
  return v;
}
std::vector<std::string> tokens_of(const std::string& text) {
  std::vector<std::string> v;
  size_t pos = 0;
  while ((pos = text.find_first_not_of(" \n", pos)) != std::string::npos) {
    const size_t end = std::min(text.find_first_of(" \n", pos), text.size());
    v.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return v;
}
// "n\na1 a2 ... an\n" for a list of numbers.
std::string list_input(const std::vector<int64_t>& v) {
  return fmt::format("{}\n{}\n", v.size(), joined(v));
}

Problem sum_family(RandomStream& rng, int d) {
  std::vector<std::string> inputs;
  for (auto n : test_sizes(rng, d))
    inputs.push_back(list_input(random_numbers(rng, n, -kBillion, kBillion)));
  return stdin_problem(
      "sum",
      fmt::format("Print the sum of n integers.\n\nInput: the first line holds n (1 <= n <= {}), "
                  "the second n integers a_i (-10^9 <= a_i <= 10^9) separated by spaces.\n"
                  "Output: their sum.",
                  size_limit(d)),
      inputs,
      [](const std::string& in) {
        auto v = integers_of(in);
        return fmt::format("{}\n", std::accumulate(v.begin() + 1, v.end(), int64_t{0}));
      },
      "import sys\n\ndata = sys.stdin.read().split()\nn = int(data[0])\n"
      "print(sum(int(x) for x in data[1:1 + n]))\n");
}

Problem min_max_family(RandomStream& rng, int d) {
  std::vector<std::string> inputs;
  for (auto n : test_sizes(rng, d))
    inputs.push_back(list_input(random_numbers(rng, n, -kBillion, kBillion)));
  return stdin_problem(
      "min_max",
      fmt::format("Print the smallest and the largest of n integers.\n\nInput: the first line "
                  "holds n (1 <= n <= {}), the second n integers a_i (-10^9 <= a_i <= 10^9).\n"
                  "Output: the minimum and the maximum, separated by a space.",
                  size_limit(d)),
      inputs,
      [](const std::string& in) {
        auto v = integers_of(in);
        int64_t lo = v[1], hi = v[1];
        for (size_t i = 1; i < v.size(); ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
        return fmt::format("{} {}\n", lo, hi);
      },
      "import sys\n\ndata = sys.stdin.read().split()\nn = int(data[0])\n"
      "nums = [int(x) for x in data[1:1 + n]]\nprint(min(nums), max(nums))\n");
}

Problem reverse_words_family(RandomStream& rng, int d) {
  std::vector<std::string> inputs;
  for (auto n : test_sizes(rng, d)) {
    std::vector<std::string> words;
    for (int64_t i = 0; i < n; ++i) {
      words.push_back(random_word(rng, rng.uniform_int(1, 8), "abcdefghijklmnopqrstuvwxyz"));
    }
    inputs.push_back(fmt::format("{}\n", fmt::join(words, " ")));
  }
  return stdin_problem(
      "reverse_words",
      fmt::format("Reverse the order of the words of a line.\n\nInput: one line of 1 to {} words "
                  "of lowercase letters separated by single spaces.\nOutput: the words in "
                  "reverse order, separated by single spaces.",
                  size_limit(d)),
      inputs,
      [](const std::string& in) {
        auto words = tokens_of(in);
        std::reverse(words.begin(), words.end());
        return fmt::format("{}\n", fmt::join(words, " "));
      },
      "import sys\n\nwords = sys.stdin.readline().split()\nprint(\" \".join(reversed(words)))\n");
}

Problem count_vowels_family(RandomStream& rng, int d) {
  std::vector<std::string> inputs;
  for (auto t : test_sizes(rng, d)) {
    std::string in = fmt::format("{}\n", t);
    for (int64_t i = 0; i < t; ++i) {
      in += random_word(rng, rng.uniform_int(1, 20), "abcdefghijklmnopqrstuvwxyzAEIOUaeiouBCDXYZ") +
            "\n";
    }
    inputs.push_back(in);
  }
  return stdin_problem(
      "count_vowels",
      fmt::format("Count the vowels (a, e, i, o, u, in either case) of each word.\n\nInput: the "
                  "first line holds t (1 <= t <= {}); each of the next t lines holds a word of "
                  "1 to 20 ASCII letters.\nOutput: t lines, the number of vowels of each word.",
                  size_limit(d)),
      inputs,
      [](const std::string& in) {
        auto words = tokens_of(in);
        std::string out;
        for (size_t i = 1; i < words.size(); ++i) {
          int64_t vowels = 0;
          for (char c : words[i])
            vowels += std::string_view("aeiouAEIOU").find(c) != std::string_view::npos;
          out += fmt::format("{}\n", vowels);
        }
        return out;
      },
      "import sys\n\ndata = sys.stdin.read().split()\nt = int(data[0])\n"
      "for word in data[1:1 + t]:\n    print(sum(1 for c in word if c in \"aeiouAEIOU\"))\n");
}

Problem fizzbuzz_family(RandomStream& rng, int d) {
  std::vector<std::string> inputs;
  for (auto n : test_sizes(rng, d)) inputs.push_back(fmt::format("{}\n", n));
  return stdin_problem(
      "fizzbuzz",
      fmt::format("Play FizzBuzz.\n\nInput: one integer n (1 <= n <= {}).\nOutput: n lines; "
                  "line i is \"FizzBuzz\" if i is divisible by 15, else \"Fizz\" if by 3, else "
                  "\"Buzz\" if by 5, else i itself.",
                  size_limit(d)),
      inputs,
      [](const std::string& in) {
        std::string out;
        for (int64_t i = 1, n = integers_of(in)[0]; i <= n; ++i) {
          const bool by3 = i % 3 == 0, by5 = i % 5 == 0;
          out += by3 && by5 ? "FizzBuzz" : by3 ? "Fizz" : by5 ? "Buzz" : std::to_string(i);
          out += "\n";
        }
        return out;
      },
      "n = int(input())\nfor i in range(1, n + 1):\n    if i % 15 == 0:\n"
      "        print(\"FizzBuzz\")\n    elif i % 3 == 0:\n        print(\"Fizz\")\n"
      "    elif i % 5 == 0:\n        print(\"Buzz\")\n    else:\n        print(i)\n");
}

Problem gcd_list_family(RandomStream& rng, int d) {
  std::vector<std::pair<std::string, std::string>> calls;
  for (auto n : test_sizes(rng, d)) {
    // A common factor times random cofactors, so the answer is rarely 1.
    const int64_t factor = rng.uniform_int(1, 1000);
    auto v = random_numbers(rng, n, 1, 1000000);
    for (auto& x : v) x *= factor;
    int64_t g = 0;
    for (auto x : v) g = std::gcd(g, x);
    calls.emplace_back("gcd_list(" + python_list(v) + ")", std::to_string(g));
  }
  return assert_problem(
      "gcd_list",
      fmt::format("Write a Python function `gcd_list(nums)` that returns the greatest common "
                  "divisor of a list of 1 to {} positive integers (each at most 10^9).",
                  size_limit(d)),
      calls,
      "from math import gcd\n\n\ndef gcd_list(nums):\n    g = 0\n    for x in nums:\n"
      "        g = gcd(g, x)\n    return g\n");
}

Problem transpose_family(RandomStream& rng, int d) {
  std::vector<std::string> inputs;
  for (auto cells : test_sizes(rng, d)) {
    const int64_t rows = rng.uniform_int(1, cells);
    const int64_t cols = std::max<int64_t>(1, cells / rows);
    std::string in = fmt::format("{} {}\n", rows, cols);
    for (int64_t r = 0; r < rows; ++r) in += joined(random_numbers(rng, cols, -99, 99)) + "\n";
    inputs.push_back(in);
  }
  return stdin_problem(
      "transpose",
      fmt::format("Transpose a matrix.\n\nInput: the first line holds r and c (r * c <= {}); "
                  "then r lines of c integers each.\nOutput: the transpose: c lines of r "
                  "integers each, separated by spaces.",
                  size_limit(d)),
      inputs,
      [](const std::string& in) {
        auto v = integers_of(in);
        const int64_t rows = v[0], cols = v[1];
        std::string out;
        for (int64_t c = 0; c < cols; ++c) {
          std::vector<int64_t> line;
          for (int64_t r = 0; r < rows; ++r) line.push_back(v[2 + r * cols + c]);
          out += joined(line) + "\n";
        }
        return out;
      },
      "import sys\n\ndata = sys.stdin.read().split()\nr, c = int(data[0]), int(data[1])\n"
      "rows = [data[2 + i * c:2 + (i + 1) * c] for i in range(r)]\nfor j in range(c):\n"
      "    print(\" \".join(rows[i][j] for i in range(r)))\n");
}

Problem run_length_family(RandomStream& rng, int d) {
  std::vector<std::string> inputs;
  for (auto runs : test_sizes(rng, d)) {
    std::string s;
    for (int64_t i = 0; i < runs; ++i)
      s += std::string(rng.uniform_int(1, 12), "abc"[rng.uniform_int(0, 2)]);
    inputs.push_back(s + "\n");
  }
  return stdin_problem(
      "run_length",
      fmt::format("Run-length encode a string: replace each maximal run of equal letters by the "
                  "letter followed by the run's length (\"aaabcc\" becomes \"a3b1c2\").\n\n"
                  "Input: one line of lowercase letters (at most {} characters).\nOutput: the "
                  "encoding.",
                  size_limit(d) * 12),
      inputs,
      [](const std::string& in) {
        const std::string s = tokens_of(in)[0];
        std::string out;
        for (size_t i = 0; i < s.size();) {
          size_t j = i;
          while (j < s.size() && s[j] == s[i]) ++j;
          out += s[i] + std::to_string(j - i);
          i = j;
        }
        return out + "\n";
      },
      "s = input().strip()\nout = []\ni = 0\nwhile i < len(s):\n    j = i\n"
      "    while j < len(s) and s[j] == s[i]:\n        j += 1\n"
      "    out.append(s[i] + str(j - i))\n    i = j\nprint(\"\".join(out))\n");
}

// A random balanced bracket string of `pairs` pairs.
std::string balanced_brackets(RandomStream& rng, int64_t pairs) {
  std::string s, stack;
  int64_t opened = 0;
  while (opened < pairs || !stack.empty()) {
    if (opened < pairs && (stack.empty() || rng.bernoulli(0.5))) {
      const char open = "([{"[rng.uniform_int(0, 2)];
      s += open;
      stack += open == '(' ? ')' : open == '[' ? ']' : '}';
      ++opened;
    } else {
      s += stack.back();
      stack.pop_back();
    }
  }
  return s;
}

bool is_balanced(const std::string& s) {
  std::string stack;
  for (char c : s) {
    if (c == '(' || c == '[' || c == '{') {
      stack += c;
    } else {
      const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (stack.empty() || stack.back() != open) return false;
      stack.pop_back();
    }
  }
  return stack.empty();
}

Problem brackets_family(RandomStream& rng, int d) {
  std::vector<std::string> inputs;
  for (auto t : test_sizes(rng, d)) {
    std::string in = fmt::format("{}\n", t);
    for (int64_t i = 0; i < t; ++i) {
      std::string s = balanced_brackets(rng, rng.uniform_int(1, 10));
      if (rng.bernoulli(0.5)) {  // break it, usually: change, drop or swap a character
        const auto k = rng.uniform_int(0, static_cast<int64_t>(s.size()) - 1);
        const auto how = rng.uniform_int(0, 2);
        if (how == 0) s[k] = "()[]{}"[rng.uniform_int(0, 5)];
        if (how == 1 && s.size() > 1) s.erase(k, 1);
        if (how == 2) std::swap(s[k], s[rng.uniform_int(0, static_cast<int64_t>(s.size()) - 1)]);
      }
      in += s + "\n";
    }
    inputs.push_back(in);
  }
  return stdin_problem(
      "brackets",
      fmt::format("Decide whether bracket strings are balanced: every bracket closed by the "
                  "matching kind, in the right order.\n\nInput: the first line holds t "
                  "(1 <= t <= {}); each of the next t lines a non-empty string of the characters "
                  "()[]{{}}.\nOutput: t lines, YES or NO.",
                  size_limit(d)),
      inputs,
      [](const std::string& in) {
        auto lines = tokens_of(in);
        std::string out;
        for (size_t i = 1; i < lines.size(); ++i) out += is_balanced(lines[i]) ? "YES\n" : "NO\n";
        return out;
      },
      "import sys\n\ndata = sys.stdin.read().split()\nt = int(data[0])\n"
      "closing = {\")\": \"(\", \"]\": \"[\", \"}\": \"{\"}\nfor s in data[1:1 + t]:\n"
      "    stack = []\n    ok = True\n    for ch in s:\n        if ch in \"([{\":\n"
      "            stack.append(ch)\n        elif not stack or stack.pop() != closing[ch]:\n"
      "            ok = False\n            break\n"
      "    print(\"YES\" if ok and not stack else \"NO\")\n");
}

Problem primes_family(RandomStream& rng, int d) {
  // n up to 10 * 4^d, capped at 10^6: a sieve is needed from difficulty 8 or so.
  int64_t most = 10;
  for (int i = 0; i < d; ++i) most = std::min<int64_t>(most * 4, 1000000);
  std::vector<std::string> inputs;
  for (int i = 0, n = test_count(d); i < n; ++i) {
    inputs.push_back(fmt::format("{}\n", i == 0       ? rng.uniform_int(1, 30)
                                         : i == n - 1 ? most
                                                      : rng.uniform_int(1, most)));
  }
  return stdin_problem(
      "primes",
      fmt::format("Count the primes up to n and add them up.\n\nInput: one integer n "
                  "(1 <= n <= {}).\nOutput: the number of primes p <= n and their sum, separated "
                  "by a space.",
                  most),
      inputs,
      [](const std::string& in) {
        const int64_t n = integers_of(in)[0];
        int64_t count = 0, sum = 0;
        for (int64_t p = 2; p <= n; ++p) {  // trial division: slow but independent of a sieve
          bool prime = true;
          for (int64_t q = 2; q * q <= p && prime; ++q) prime = p % q != 0;
          if (prime) ++count, sum += p;
        }
        return fmt::format("{} {}\n", count, sum);
      },
      "from math import isqrt\n\nn = int(input())\nsieve = bytearray([1]) * (n + 1)\n"
      "sieve[0] = 0\nif n >= 1:\n    sieve[1] = 0\nfor i in range(2, isqrt(n) + 1):\n"
      "    if sieve[i]:\n        sieve[i * i::i] = bytes(len(range(i * i, n + 1, i)))\n"
      "primes = [i for i in range(n + 1) if sieve[i]]\nprint(len(primes), sum(primes))\n");
}

Problem two_sum_family(RandomStream& rng, int d) {
  std::vector<std::pair<std::string, std::string>> calls;
  for (auto n : test_sizes(rng, d, 2)) {
    const int64_t range = std::max<int64_t>(10, n);
    auto v = random_numbers(rng, n, -range, range);
    // Usually a target that some pair reaches; sometimes any target.
    int64_t target = rng.uniform_int(-2 * range, 2 * range);
    if (rng.bernoulli(0.8)) {
      target = v[rng.uniform_int(0, n - 1)] + v[rng.uniform_int(0, n - 1)];
    }
    std::pair<int64_t, int64_t> answer{-1, -1};
    for (int64_t i = 0; i < n && answer.first < 0; ++i) {  // brute force
      for (int64_t j = i + 1; j < n; ++j) {
        if (v[i] + v[j] == target) {
          answer = {i, j};
          break;
        }
      }
    }
    calls.emplace_back(fmt::format("two_sum({}, {})", python_list(v), target),
                       fmt::format("({}, {})", answer.first, answer.second));
  }
  return assert_problem(
      "two_sum",
      fmt::format("Write a Python function `two_sum(nums, target)` that returns a tuple (i, j) of "
                  "indices, i < j, with nums[i] + nums[j] == target: the one with the smallest i, "
                  "and among those the smallest j; (-1, -1) when there is none. nums holds 2 to {} "
                  "integers.",
                  std::max<int64_t>(2, size_limit(d))),
      calls,
      "from bisect import bisect_right\n\n\ndef two_sum(nums, target):\n    where = {}\n"
      "    for j, x in enumerate(nums):\n        where.setdefault(x, []).append(j)\n"
      "    for i, x in enumerate(nums):\n        js = where.get(target - x)\n        if js:\n"
      "            k = bisect_right(js, i)\n            if k < len(js):\n"
      "                return (i, js[k])\n    return (-1, -1)\n");
}

// F(n) mod m by fast doubling: (F(k), F(k+1)) -> (F(2k), F(2k+1)).
uint64_t fibonacci_mod(uint64_t n, uint64_t m) {
  unsigned __int128 a = 0, b = 1 % m;  // F(0), F(1)
  for (int bit = 63; bit >= 0; --bit) {
    const unsigned __int128 c = a * ((2 * b + m - a) % m) % m;  // F(2k)
    const unsigned __int128 e = (a * a + b * b) % m;            // F(2k+1)
    a = c, b = e;
    if ((n >> bit) & 1) {
      const unsigned __int128 next = (a + b) % m;
      a = b, b = next;
    }
  }
  return static_cast<uint64_t>(a);
}

Problem fibonacci_family(RandomStream& rng, int d) {
  // n up to 10^3 at difficulty 5, times 1000 per level, up to 10^18: a loop stops working at 7.
  int64_t most = 1000;
  for (int i = 5; i < d; ++i) most = std::min<int64_t>(most * 1000, 1000000000000000000);
  std::vector<std::string> inputs;
  for (int i = 0, n = test_count(d); i < n; ++i) {
    const int64_t index = i == 0       ? rng.uniform_int(0, 20)
                          : i == n - 1 ? most
                                       : rng.uniform_int(0, most);
    inputs.push_back(fmt::format("{} {}\n", index, rng.uniform_int(2, 1000000000)));
  }
  return stdin_problem(
      "fibonacci_mod",
      fmt::format("Compute a Fibonacci number modulo m, where F(0) = 0, F(1) = 1 and "
                  "F(k) = F(k-1) + F(k-2).\n\nInput: one line with n and m (0 <= n <= {}, "
                  "2 <= m <= 10^9).\nOutput: F(n) mod m.",
                  most),
      inputs,
      [](const std::string& in) {
        auto v = integers_of(in);
        return fmt::format("{}\n", fibonacci_mod(v[0], v[1]));
      },
      "import sys\n\n\ndef fib(n, m):\n    # (F(n), F(n + 1)) mod m by fast doubling\n"
      "    if n == 0:\n        return 0, 1 % m\n    a, b = fib(n // 2, m)\n"
      "    c = a * ((2 * b - a) % m) % m\n    d = (a * a + b * b) % m\n"
      "    return (d, (c + d) % m) if n % 2 else (c, d)\n\n\n"
      "n, m = map(int, sys.stdin.read().split())\nprint(fib(n, m)[0])\n");
}

Problem inversions_family(RandomStream& rng, int d) {
  std::vector<std::string> inputs;
  for (auto n : test_sizes(rng, d)) inputs.push_back(list_input(random_numbers(rng, n, 1, n)));
  return stdin_problem(
      "inversions",
      fmt::format("Count the inversions of a sequence: pairs i < j with a_i > a_j.\n\nInput: the "
                  "first line holds n (1 <= n <= {}), the second n integers (1 <= a_i <= n).\n"
                  "Output: the number of inversions.",
                  size_limit(d)),
      inputs,
      [](const std::string& in) {
        auto v = integers_of(in);
        int64_t count = 0;
        for (size_t i = 1; i < v.size(); ++i) {
          for (size_t j = i + 1; j < v.size(); ++j) count += v[i] > v[j];
        }
        return fmt::format("{}\n", count);
      },
      "import sys\n\n\ndef sort_count(a):\n    if len(a) <= 1:\n        return a, 0\n"
      "    mid = len(a) // 2\n    left, x = sort_count(a[:mid])\n"
      "    right, y = sort_count(a[mid:])\n    merged, count = [], x + y\n    i = j = 0\n"
      "    while i < len(left) and j < len(right):\n        if left[i] <= right[j]:\n"
      "            merged.append(left[i])\n            i += 1\n        else:\n"
      "            merged.append(right[j])\n            j += 1\n"
      "            count += len(left) - i\n    merged += left[i:]\n    merged += right[j:]\n"
      "    return merged, count\n\n\ndata = sys.stdin.read().split()\nn = int(data[0])\n"
      "print(sort_count([int(x) for x in data[1:1 + n]])[1])\n");
}

Problem lis_family(RandomStream& rng, int d) {
  std::vector<std::string> inputs;
  for (auto n : test_sizes(rng, d))
    inputs.push_back(list_input(random_numbers(rng, n, -1000000, 1000000)));
  return stdin_problem(
      "longest_increasing",
      fmt::format("Find the length of the longest strictly increasing subsequence.\n\nInput: the "
                  "first line holds n (1 <= n <= {}), the second n integers "
                  "(-10^6 <= a_i <= 10^6).\nOutput: the length.",
                  size_limit(d)),
      inputs,
      [](const std::string& in) {
        auto v = integers_of(in);
        std::vector<int64_t> best(v.size(), 1);  // quadratic DP: independent of patience sorting
        int64_t longest = 0;
        for (size_t i = 1; i < v.size(); ++i) {
          for (size_t j = 1; j < i; ++j) {
            if (v[j] < v[i]) best[i] = std::max(best[i], best[j] + 1);
          }
          longest = std::max(longest, best[i]);
        }
        return fmt::format("{}\n", longest);
      },
      "import sys\nfrom bisect import bisect_left\n\ndata = sys.stdin.read().split()\n"
      "n = int(data[0])\ntails = []\nfor x in map(int, data[1:1 + n]):\n"
      "    k = bisect_left(tails, x)\n    if k == len(tails):\n        tails.append(x)\n"
      "    else:\n        tails[k] = x\nprint(len(tails))\n");
}

struct Family {
  int min_difficulty;
  Problem (*make)(RandomStream&, int);
};
constexpr Family kFamilies[] = {
    {1, sum_family},          {1, min_max_family},    {1, reverse_words_family},
    {1, count_vowels_family}, {1, fizzbuzz_family},   {1, gcd_list_family},
    {2, transpose_family},    {3, run_length_family}, {3, brackets_family},
    {4, primes_family},       {4, two_sum_family},    {5, fibonacci_family},
    {6, inversions_family},   {7, lis_family},
};

// ---------------------------------------------------------------------------------------------
// Assert tests compared outside the program

// Encodes a value as python_values.h describes, accepting only exact plain types; used by the plan
// (on the task's literals) and by the harness (on what the program returned).
constexpr const char* kEncoder = R"PY(import json, os, sys
if hasattr(sys, 'set_int_max_str_digits'):
    sys.set_int_max_str_digits(0)


def _trellis_encode(x, depth=0):
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return {'int': int.__repr__(x)}
    if t is float:
        return {'float': float.__repr__(x)}
    if depth >= 100:
        raise ValueError('the test result is nested more than 100 levels deep')
    if t is list:
        return {'list': [_trellis_encode(v, depth + 1) for v in x]}
    if t is tuple:
        return {'tuple': [_trellis_encode(v, depth + 1) for v in x]}
    if t is set or t is frozenset:
        return {'set': [_trellis_encode(v, depth + 1) for v in x]}
    if t is dict:
        return {'dict': [[_trellis_encode(k, depth + 1), _trellis_encode(v, depth + 1)]
                         for k, v in dict.items(x)]}
    raise TypeError('a test result must be None, bool, int, float, str, list, tuple, set or '
                    'dict, not ' + type.__repr__(t))
)PY";

// The plan (trusted; the program is not in it): stdin holds each assert's code in hex, one a line;
// stdout gets one line each: null, or {"call": expression, "expected": encoded literal}.
constexpr const char* kPlanner = R"PY(

import ast


def _trellis_plan(code):
    try:
        tree = ast.parse(code)
    except Exception:
        return None
    if len(tree.body) != 1 or type(tree.body[0]) is not ast.Assert:
        return None
    test = tree.body[0].test
    if type(test) is not ast.Compare or len(test.ops) != 1 or type(test.ops[0]) is not ast.Eq:
        return None
    sides = [test.left, test.comparators[0]]
    for literal in (1, 0):
        try:
            expected = _trellis_encode(ast.literal_eval(sides[literal]))
        except Exception:
            continue
        node = sides[1 - literal]
        call = ast.get_source_segment(code, node) or ast.unparse(node)
        return {'call': call, 'expected': expected}
    return None


for line in sys.stdin:
    plan = _trellis_plan(bytes.fromhex(line.strip()).decode('utf-8', 'replace'))
    print(json.dumps(plan, ensure_ascii=True))
)PY";

// The harness: runs the program as __main__, evaluates the test's expression, and writes the
// encoded result to the channel. {program} and {call} are hex.
constexpr const char* kHarness = R"PY(

def _trellis_test(program, call, encode=_trellis_encode, dumps=json.dumps, write=os.write):
    namespace = globals()
    exec(compile(program, 'main.py', 'exec'), namespace)
    value = eval(compile(call, 'test', 'eval'), namespace)
    data = dumps(encode(value), ensure_ascii=True).encode('ascii')
    while data:
        data = data[write({fd}, data):]


_trellis_test(bytes.fromhex('{program}'), bytes.fromhex('{call}'))
)PY";

std::string hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char c : bytes) fmt::format_to(std::back_inserter(out), "{:02x}", c);
  return out;
}

// How an assert test is checked outside the program: the expression to evaluate in it, and the
// canonical form of the value it must equal.
struct AssertPlan {
  std::string call;
  std::string expected;
};

// ---------------------------------------------------------------------------------------------

// "trellis-asserts-done-" and 64 random bits.
std::string assert_marker() {
  static thread_local std::random_device device;
  return fmt::format("trellis-asserts-done-{:08x}{:08x}", device(), device());
}

class CodeEnvironment final : public Environment {
 public:
  explicit CodeEnvironment(const SandboxLimits& limits) : sandbox_(limits) {}

  std::string name() const override { return "code"; }

  std::string description() const override {
    return "write a Python program, run in a sandbox against tests (stdin/stdout or asserts); "
           "difficulty sets the problem families (1: sum, min/max, reverse words, vowels, "
           "FizzBuzz, gcd; +transpose at 2, run-length and brackets at 3, primes and two-sum at "
           "4, Fibonacci mod m at 5, inversions at 6, longest increasing subsequence at 7), "
           "input sizes (5 .. 5000 items) and test count (3 .. 6)";
  }

  std::string system_prompt() const override {
    return "Solve the programming problem in Python 3. Give your final answer as one complete "
           "program in a ```python code block; the last ```python block of your reply is run. "
           "When the problem describes input and output, read from standard input and print to "
           "standard output; when it asks for a function, define it (tests call it). Use only "
           "the standard library.";
  }

  Task generate(uint64_t seed, int difficulty) const override {
    check_difficulty(difficulty, "code.generate");
    RandomStream rng(seed);
    std::vector<const Family*> open;
    for (const auto& f : kFamilies) {
      if (f.min_difficulty <= difficulty) open.push_back(&f);
    }
    Problem p =
        open[rng.uniform_int(0, static_cast<int64_t>(open.size()) - 1)]->make(rng, difficulty);
    Task t = generated_task(*this, seed, difficulty);
    t.prompt = std::move(p.prompt);
    t.verification_info = {{"language", "python"}, {"test_cases", std::move(p.tests)}};
    t.solution = "```python\n" + p.program + "```\n";
    t.metadata["family"] = p.family;
    return t;
  }

  void validate(const Task& task, const std::string& where) const override {
    test_cases(task.verification_info, where);
  }

  Score score(const Task& task, std::string_view completion) const override {
    std::vector<TestCase> tests;
    try {
      tests = test_cases(task.verification_info, task.task_id);
    } catch (const Error& e) {
      return {0, fmt::format("invalid task: {}", e.what())};
    }
    const auto block = last_python_block(strip_reasoning(completion));
    if (!block) return {0, "no ```python block found"};
    if (block->size() > kMaxProgramBytes) {
      return {0, fmt::format("program longer than {} KiB", kMaxProgramBytes / 1024)};
    }
    if (trim(*block).empty()) return {0, "the ```python block is empty"};
    const std::string program(*block);
    const size_t n = tests.size();
    std::vector<std::optional<AssertPlan>> plans;
    if (std::string error = plan_asserts(tests, plans); !error.empty()) return {0, error};
    for (size_t i = 0; i < n; ++i) {
      const TestCase& t = tests[i];
      if (plans[i]) {
        if (auto failed = run_planned(program, *plans[i], t, i, n)) return *failed;
        continue;
      }
      // Throws only when the sandbox cannot run at all: a broken setup, not a wrong answer.
      // An assert test passes only if the line after the asserts runs: a program that exits early
      // (sys.exit(0) at import, an excepthook calling os._exit(0)) skips the asserts but must not
      // pass. The marker is fresh per run, so a program cannot print it in advance.
      const std::string marker = t.is_assert ? assert_marker() : "";
      const SandboxResult r =
          t.is_assert ? sandbox_.run(program + "\n" + t.code + "\nprint(\"" + marker + "\")", "")
                      : sandbox_.run(program, t.input);
      if (!r.passed()) {
        if (t.is_assert && r.err.find("AssertionError") != std::string::npos) {
          return {0,
                  fmt::format("test {}/{}: assertion failed: {}", i + 1, n, quoted(trim(t.code)))};
        }
        return {0, fmt::format("test {}/{}: {}", i + 1, n, r.failure)};
      }
      if (t.is_assert && !trim(r.out).ends_with(marker)) {
        return {0, fmt::format("test {}/{}: the program exited before its asserts ran", i + 1, n)};
      }
      if (!t.is_assert) {
        if (auto diff = output_difference(t.output, r.out); !diff.empty()) {
          return {0, fmt::format("test {}/{}: {}", i + 1, n, diff)};
        }
      }
    }
    return {1, fmt::format("all {} tests passed", n)};
  }

 private:
  // Reads the task's asserts in a sandboxed run without the program: plans[i] for each test that
  // is `assert <expression> == <literal>`. "" or why the tests could not be read.
  std::string plan_asserts(const std::vector<TestCase>& tests,
                           std::vector<std::optional<AssertPlan>>& plans) const {
    plans.assign(tests.size(), std::nullopt);
    std::string input;
    for (const auto& t : tests) {
      if (t.is_assert) input += hex(t.code) + "\n";
    }
    if (input.empty()) return "";
    const SandboxResult r = sandbox_.run(std::string(kEncoder) + kPlanner, input);
    if (!r.passed()) return fmt::format("the assert tests could not be read: {}", r.failure);
    std::string_view out = r.out;
    for (size_t i = 0; i < tests.size(); ++i) {
      if (!tests[i].is_assert) continue;
      const size_t end = out.find('\n');
      if (end == std::string_view::npos) return "the assert tests could not be read: no plan";
      const std::string_view line = out.substr(0, end);
      out.remove_prefix(end + 1);
      if (line == "null") continue;
      // Trusted output (the encoder bounds the nesting): parsed as it is.
      const Json parsed = Json::parse(line, nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("call") ||
          !parsed["call"].is_string() || !parsed.contains("expected")) {
        return "the assert tests could not be read: a malformed plan";
      }
      std::string error;
      auto expected = canonical_python_value(parsed["expected"].dump(), error);
      if (!expected) continue;  // a literal the encoding has no form for: run the assert
      plans[i] = AssertPlan{parsed["call"].get<std::string>(), std::move(*expected)};
    }
    return "";
  }

  // Runs test i (of n) by its plan; the Score when it fails.
  std::optional<Score> run_planned(const std::string& program, const AssertPlan& plan,
                                   const TestCase& t, size_t i, size_t n) const {
    const std::string harness =
        std::string(kEncoder) +
        fmt::format(fmt::runtime(kHarness), fmt::arg("fd", Sandbox::kChannelFd),
                    fmt::arg("program", hex(program)), fmt::arg("call", hex(plan.call)));
    const SandboxResult r = sandbox_.run(harness, "", RunOptions{.channel = true});
    if (!r.passed()) return Score{0, fmt::format("test {}/{}: {}", i + 1, n, r.failure)};
    if (r.channel.empty()) {
      return Score{0,
                   fmt::format("test {}/{}: the program exited before its asserts ran", i + 1, n)};
    }
    std::string error;
    const auto got = canonical_python_value(r.channel, error);
    if (!got) {
      return Score{0, fmt::format("test {}/{}: its result could not be read: {}", i + 1, n, error)};
    }
    if (*got != plan.expected) {
      return Score{0,
                   fmt::format("test {}/{}: assertion failed: {}", i + 1, n, quoted(trim(t.code)))};
    }
    return std::nullopt;
  }

  Sandbox sandbox_;
};

}  // namespace

std::unique_ptr<Environment> make_code_environment(const SandboxLimits& limits) {
  return std::make_unique<CodeEnvironment>(limits);
}

}  // namespace trellis::env
