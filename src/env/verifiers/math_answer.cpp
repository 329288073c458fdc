// Math answer extraction, normalisation and equivalence (see math_answer.h for the policies).
//
// The pipeline: extract (linear scans) -> normalise (linear passes over at most 1000 characters)
// -> read into an Answer tree with a bounded recursive-descent parser of our own -> convert the
// expressions to GiNaC under guards -> decide. We parse ourselves rather than hand strings to
// GiNaC::parser because GiNaC evaluates powers while it parses: 10^10^10 would be computed before
// we could refuse it, and its grammar knows neither LaTeX nor implicit multiplication.
#include "env/verifiers/math_answer.h"

#include "env/verifiers/ginac_lock.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <ginac/ginac.h>

#include "env/answer_extraction.h"
#include "env/verifiers/expression.h"

namespace trellis::env {
namespace {

constexpr size_t kMaxScannedBytes = size_t{1} << 20;
constexpr int kMaxNesting = 50;       // brackets
constexpr int kMaxParserDepth = 200;  // parser recursion (about three frames per bracket)
constexpr int kMaxAnswerDepth = 8;    // tuples within tuples within relations...
constexpr size_t kMaxItems = 50;      // elements of a tuple, set or union
constexpr size_t kMaxNodes = 2000;    // expression tree size
constexpr size_t kMaxSymbols = 16;
constexpr long kMaxExponent = 10000;
constexpr long kMaxNumberBits = 40000;
constexpr long kMaxFactorial = 1000;
constexpr long kMaxBinomialN = 10000;
constexpr long kMaxSymbolicBinomialK = 100;
constexpr double kMaxExpansionTerms = 2000;     // beyond this, normal() is skipped: numbers decide
constexpr size_t kMaxNormalIndeterminates = 4;  // likewise: gcds in more variables explode
constexpr int kDigits = 50;                     // GiNaC's precision for evalf
constexpr int kPoints = 6;                      // evaluation points for expressions with symbols
constexpr int kMinValidPoints = 3;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (lower(s[i]) != lower(prefix[i])) return false;
  }
  return true;
}

bool equal_nocase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && starts_with_nocase(a, b);
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  if (s.find(from) == std::string::npos) return s;
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  for (size_t at; (at = s.find(from, i)) != std::string::npos; i = at + from.size()) {
    out.append(s, i, at - i);
    out += to;
  }
  out.append(s, i);
  return out;
}

// The position of the '}' closing the {group} that opens at s[open] (escaped braces do not
// count), or npos when it is not closed.
size_t closing_brace(std::string_view s, size_t open) {
  int64_t depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '{') {
      ++depth;
    } else if (s[i] == '}' && --depth == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

// Reads the {group} at s[i] == '{' and moves i past it (to the end when it is not closed).
std::string_view read_group(std::string_view s, size_t& i) {
  const size_t open = i;
  const size_t close = closing_brace(s, open);
  if (close == std::string_view::npos) {
    i = s.size();
    return s.substr(open + 1);
  }
  i = close + 1;
  return s.substr(open + 1, close - open - 1);
}

// ---------------------------------------------------------------------------------------------
// Extraction

// The argument of a \boxed whose name ends just before `rest`: a balanced {group} (escaped
// braces do not count), or for "\boxed 5" the next word. None when the group is not closed.
std::optional<std::string> boxed_argument(std::string_view rest) {
  size_t i = 0;
  while (i < rest.size() && is_space(rest[i])) ++i;
  if (i == rest.size()) return std::nullopt;
  if (rest[i] == '{') {
    const size_t close = closing_brace(rest, i);
    if (close == std::string_view::npos) return std::nullopt;
    return std::string(trim(rest.substr(i + 1, close - i - 1)));
  }
  size_t end = i;
  while (end < rest.size() && !is_space(rest[end]) && rest[end] != '$') ++end;
  if (end == i) return std::nullopt;
  return std::string(rest.substr(i, end - i));
}

// The position just after the name of the last \boxed or \fbox command (not a longer command
// such as \boxedfoo), or npos.
size_t last_box(std::string_view text) {
  size_t best = std::string_view::npos;
  for (std::string_view name : {std::string_view("\\boxed"), std::string_view("\\fbox")}) {
    size_t at = text.size();
    while (at > 0) {
      at = text.rfind(name, at - 1);
      if (at == std::string_view::npos) break;
      const size_t after = at + name.size();
      if (after < text.size() && is_letter(text[after])) continue;
      if (best == std::string_view::npos || after > best) best = after;
      break;
    }
  }
  return best;
}

// Markdown around a line: emphasis, headings, quotes, bullets.
std::string_view drop_leading_markup(std::string_view s) {
  while (!s.empty() && (s.front() == '*' || s.front() == '#' || s.front() == '>' ||
                        s.front() == '_' || s.front() == '-' || is_space(s.front()))) {
    s.remove_prefix(1);
  }
  return s;
}

std::string_view strip_markup(std::string_view s) {
  s = drop_leading_markup(trim(s));
  while (!s.empty() && (s.back() == '*' || s.back() == '_' || s.back() == '.' ||
                        is_space(s.back()) || s.back() == '$')) {
    s.remove_suffix(1);
  }
  while (!s.empty() && (s.front() == '$' || is_space(s.front()))) s.remove_prefix(1);
  return s;
}

// For a line labelled as the answer: what follows the label ("" for a bare heading), else none.
std::optional<std::string_view> after_answer_label(std::string_view line) {
  std::string_view s = drop_leading_markup(trim(line));
  for (std::string_view label : {"the final answer is", "the answer is"}) {
    if (starts_with_nocase(s, label)) {
      s.remove_prefix(label.size());
      if (!s.empty() && s.front() == ':') s.remove_prefix(1);
      return strip_markup(s);
    }
  }
  for (std::string_view label : {"final answer", "answer"}) {
    if (!starts_with_nocase(s, label)) continue;
    s.remove_prefix(label.size());
    while (!s.empty() && (s.front() == '*' || s.front() == '_' || is_space(s.front()))) {
      s.remove_prefix(1);
    }
    if (s.empty()) return std::string_view();
    if (s.front() != ':') return std::nullopt;  // "Answering ...", "answer is ..."
    return strip_markup(s.substr(1));
  }
  return std::nullopt;
}

std::optional<std::string> answer_line(std::string_view text) {
  std::string_view below;  // the nearest non-empty line below the current one
  size_t end = text.size();
  while (true) {
    const size_t nl = end == 0 ? std::string_view::npos : text.rfind('\n', end - 1);
    const size_t start = nl == std::string_view::npos ? 0 : nl + 1;
    const std::string_view line = trim(text.substr(start, end - start));
    if (const auto answer = after_answer_label(line)) {
      if (!answer->empty()) return std::string(*answer);
      if (!below.empty()) return std::string(strip_markup(below));
    }
    if (!line.empty()) below = line;
    if (nl == std::string_view::npos) return std::nullopt;
    end = nl;
  }
}

// ---------------------------------------------------------------------------------------------
// Normalisation

// Thrown inside this file for an answer we will not read; caught before leaving it.
struct Unreadable {
  std::string reason;
};

bool in_set(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The functions LaTeX writes as commands (\sin x); plain text writes them as calls (sin(x)).
const std::unordered_set<std::string_view>& function_names() {
  static const std::unordered_set<std::string_view> names = {
      "sin",  "cos", "tan", "sec", "csc",    "cot",    "sinh",  "cosh",
      "tanh", "ln",  "log", "exp", "arcsin", "arccos", "arctan"};
  return names;
}

// A function written without a backslash: "sin(x)", "sqrt(2)", "abs(-3)".
bool is_plain_function(std::string_view w) {
  return function_names().count(w) > 0 || w == "sqrt" || w == "abs";
}

// Functions written without a backslash and words that are not units (any case).
bool is_plain_math_word(std::string_view w) {
  std::string low(w);
  for (char& c : low) c = lower(c);
  return is_plain_function(low) || in_set(low, {"pi", "or", "and"});
}

bool only_letters_and_spaces(std::string_view s, size_t min_letters) {
  size_t letters = 0;
  for (char c : s) {
    if (is_letter(c)) {
      ++letters;
    } else if (!is_space(c)) {
      return false;
    }
  }
  return letters >= min_letters;
}

// Characters outside ASCII that people and models use for math.
std::string replace_unicode(std::string s) {
  static const std::pair<std::string_view, std::string_view> table[] = {
      {"\u2212", "-"},        {"\u2013", "-"},      {"\u00d7", "*"},     {"\u00f7", "/"},
      {"\u00b7", "*"},        {"\u22c5", "*"},      {"\u03c0", "\\pi "}, {"\u221a", "\\sqrt"},
      {"\u221e", "\\infty "}, {"\u00b0", ""},       {"\u2264", "\\le "}, {"\u2265", "\\ge "},
      {"\u2260", "\\ne "},    {"\u222a", "\\cup "}, {"\u00b1", "\\pm "}, {"\u00a0", " "},
      {"\u2009", " "},        {"\u202f", " "}};
  if (std::none_of(s.begin(), s.end(),
                   [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) {
    return s;
  }
  for (const auto& [from, to] : table) s = replace_all(std::move(s), from, to);
  return s;
}

// One pass over the LaTeX: drops spacing and sizing commands, unwraps font commands, sets \text{}
// aside (collected in `text`), renames synonyms. Whitespace becomes single spaces.
std::string latex_pass(std::string_view s, std::string& text, bool& had_text) {
  static const std::unordered_map<std::string_view, std::string_view> renames = {
      {"dfrac", "\\frac"},   {"tfrac", "\\frac"}, {"cfrac", "\\frac"},  {"dbinom", "\\binom"},
      {"tbinom", "\\binom"}, {"lbrace", "\\{"},   {"rbrace", "\\}"},    {"lvert", "|"},
      {"rvert", "|"},        {"vert", "|"},       {"mid", "|"},         {"leq", "\\le"},
      {"leqslant", "\\le"},  {"geq", "\\ge"},     {"geqslant", "\\ge"}, {"neq", "\\ne"},
      {"lt", "<"},           {"gt", ">"},         {"cdot", "*"},        {"times", "*"},
      {"ast", "*"},          {"div", "/"},        {"langle", "("},      {"rangle", ")"},
      {"degree", "\\circ"},  {"dots", ""},        {"ldots", ""},        {"cdots", ""},
      {"infin", "\\infty"},  {"lparen", "("},     {"rparen", ")"},      {"lbrack", "["},
      {"rbrack", "]"}};
  std::string out;
  out.reserve(s.size());
  std::vector<char> matrices;  // the closing bracket of each open matrix environment
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\\') {
      size_t j = i + 1;
      while (j < s.size() && is_letter(s[j])) ++j;
      if (j == i + 1) {  // a control symbol: \{ \% \, ...
        if (j < s.size()) {
          switch (s[j]) {
            case '{':
              out += "\\{";
              break;
            case '}':
              out += "\\}";
              break;
            case '|':
              out += '|';
              break;
            case '\\':
              out += matrices.empty() ? ' ' : ',';
              break;  // a matrix row ends
            case ' ':
            case '\n':
              out += ' ';
              break;
            case '$':
            case ',':
            case '!':
            case ';':
            case ':':
            case '>':
              break;
            default:
              out += s[j];  // \% \# \_ \&
          }
          ++j;
        }
        i = j;
        continue;
      }
      const std::string_view name = s.substr(i + 1, j - i - 1);
      i = j;
      // A matrix or vector reads as the tuple of its entries, row by row.
      if (name == "begin" || name == "end") {
        size_t k = i;
        while (k < s.size() && is_space(s[k])) ++k;
        if (k == s.size() || s[k] != '{') continue;
        const std::string_view environment = read_group(s, k);
        i = k;
        if (environment.size() < 6 || environment.substr(environment.size() - 6) != "matrix") {
          continue;  // cases, align...: the markers go, the content stays
        }
        if (name == "begin") {
          const bool square = environment == "bmatrix";
          out += square ? '[' : '(';
          matrices.push_back(square ? ']' : ')');
        } else if (!matrices.empty()) {
          out += matrices.back();
          matrices.pop_back();
        }
        continue;
      }
      if (in_set(name, {"left", "right", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr", "Biggl",
                        "Biggr", "big", "Big", "bigg", "Bigg"})) {
        if (i < s.size() && s[i] == '.') ++i;  // \left. and \right. are invisible
        continue;
      }
      if (in_set(name, {"displaystyle", "textstyle", "scriptstyle", "quad", "qquad", "limits",
                        "nolimits", "strut", "mathstrut", "hfill", "medspace", "thinspace",
                        "thickspace", "negthinspace", "enspace", "therefore", "hline"})) {
        out += ' ';
        continue;
      }
      const bool text_command =
          in_set(name, {"text", "textbf", "textit", "textrm", "textsf", "texttt", "textnormal",
                        "textup", "textmd", "mbox", "hbox", "emph"});
      const bool font_command =
          in_set(name, {"mathrm", "mathbf", "mathit", "mathsf", "mathtt", "mathnormal",
                        "boldsymbol", "bm", "operatorname", "boxed", "fbox", "mathbb"});
      if (text_command || font_command) {
        size_t k = i;
        while (k < s.size() && is_space(s[k])) ++k;
        if (k == s.size() || s[k] != '{') continue;  // \text without a group: ignore it
        size_t after = k;
        const std::string_view content = read_group(s, after);
        // A font command around a word ("\mathrm{cm}") holds a unit, not math.
        const bool is_text =
            text_command || (in_set(name, {"mathrm", "operatorname", "mathsf", "mathtt"}) &&
                             only_letters_and_spaces(content, 2));
        if (!is_text) {
          i = k;  // unwrap: the braces stay, as a group
          continue;
        }
        i = after;
        had_text = true;
        const std::string_view word = trim(content);
        if (equal_nocase(word, "or") || equal_nocase(word, "and")) {
          out += ',';  // "1 \text{ or } 2" lists two answers
        } else {
          text.append(content);
          text += ' ';
          out += ' ';
          // The power of a unit ("\mathrm{cm}^2") goes with it.
          size_t k2 = i;
          if (k2 < s.size() && s[k2] == '^') {
            ++k2;
            if (k2 < s.size() && is_digit(s[k2])) {
              i = k2 + 1;
            } else if (k2 < s.size() && s[k2] == '{') {
              const std::string_view power = read_group(s, k2);
              if (!power.empty() && std::all_of(power.begin(), power.end(), is_digit)) i = k2;
            }
          }
        }
        continue;
      }
      if (const auto it = renames.find(name); it != renames.end()) {
        out += it->second;
        continue;
      }
      out += '\\';
      out += name;
      continue;
    }
    if (c == '$') {
      ++i;
      continue;
    }
    if (c == '&' && !matrices.empty()) {
      out += ',';
    } else {
      out += (c == '~' || is_space(c)) ? ' ' : c;
    }
    ++i;
  }
  return out;
}

// "x = 1 or x = 2" lists answers; the words become commas.
std::string words_to_commas(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t end = std::min(s.find(' ', i), s.size());
    const std::string_view word = s.substr(i, end - i);
    if (equal_nocase(word, "or") || equal_nocase(word, "and")) {
      out += ',';
    } else {
      out += word;
    }
    if (end < s.size()) out += ' ';
    i = end + 1;
  }
  return out;
}

// "5 cm", "12 km/h", "3 sq units": a number, a space, then words -> the number.
std::string_view drop_units(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  const size_t digits_start = i;
  while (i < s.size() && (is_digit(s[i]) || s[i] == ',' || s[i] == '.')) ++i;
  if (std::none_of(s.begin() + digits_start, s.begin() + i, is_digit)) return s;
  if (i < s.size() && s[i] == '%') ++i;
  const size_t number_end = i;
  if (i == s.size() || s[i] != ' ') return s;
  while (i < s.size() && s[i] == ' ') ++i;
  size_t word_end = i;
  while (word_end < s.size() && is_letter(s[word_end])) ++word_end;
  if (word_end - i < 2 || is_plain_math_word(s.substr(i, word_end - i))) return s;
  for (size_t k = word_end; k < s.size(); ++k) {
    const char c = s[k];
    if (!is_letter(c) && !is_digit(c) && c != ' ' && c != '^' && c != '/' && c != '.' && c != '-') {
      return s;
    }
  }
  return s.substr(0, number_end);
}

// Removes spaces, except one between a command name and a following letter ("\pi r").
std::string drop_spaces(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool after_command = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\\' && i + 1 < s.size() && is_letter(s[i + 1])) {
      out += c;
      while (i + 1 < s.size() && is_letter(s[i + 1])) out += s[++i];
      after_command = true;
      continue;
    }
    if (c == ' ') {
      size_t next = i;
      while (next < s.size() && s[next] == ' ') ++next;
      if (after_command && next < s.size() && is_letter(s[next])) out += ' ';
      i = next - 1;
      after_command = false;
      continue;
    }
    after_command = false;
    out += c;
  }
  return out;
}

// "1,000,000" or "-12,345.5" (optionally with a trailing %) as a whole answer.
bool is_thousands_number(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  size_t lead = 0;
  while (i < s.size() && is_digit(s[i])) ++i, ++lead;
  if (lead < 1 || lead > 3) return false;
  int groups = 0;
  while (i + 3 < s.size() && s[i] == ',' && is_digit(s[i + 1]) && is_digit(s[i + 2]) &&
         is_digit(s[i + 3])) {
    i += 4;
    ++groups;
    if (i < s.size() && is_digit(s[i])) return false;
  }
  if (groups == 0) return false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_digit(s[i])) ++i;
  }
  if (i < s.size() && s[i] == '%') ++i;
  return i == s.size();
}

std::string clean(std::string_view raw, int depth) {
  if (raw.size() > kMaxMathAnswerChars) {
    throw Unreadable{fmt::format("longer than {} characters", kMaxMathAnswerChars)};
  }
  std::string text;
  bool had_text = false;
  std::string spaced = latex_pass(replace_unicode(std::string(raw)), text, had_text);
  const bool has_content = std::any_of(spaced.begin(), spaced.end(), [](char c) {
    return is_letter(c) || is_digit(c) || c == '\\' || c == '(' || c == '[';
  });
  // The whole answer was \text{...}: it is the answer ("\text{(B)}", "\text{5 cm}").
  if (had_text && !has_content && depth < 4) return clean(text, depth + 1);
  spaced = words_to_commas(trim(spaced));
  std::string s = drop_spaces(drop_units(trim(spaced)));
  s = replace_all(std::move(s), "{,}", "");
  for (std::string_view degree : {"^{\\circ}", "^\\circ", "\\circ"}) {
    s = replace_all(std::move(s), degree, "");
  }
  if (is_thousands_number(s)) s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  while (!s.empty() && (s.back() == '.' || s.back() == ',' || s.back() == ';')) s.pop_back();
  if (s.empty()) throw Unreadable{"empty"};
  return s;
}

// Whether the answer holds an English word (4+ letters, not a command or a function name).
bool looks_like_text(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (!is_letter(s[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < s.size() && is_letter(s[end])) ++end;
    const bool command = i > 0 && s[i - 1] == '\\';
    if (!command && end - i >= 4 && !is_plain_math_word(s.substr(i, end - i))) return true;
    i = end;
  }
  return false;
}

std::string text_key(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (!is_space(c) && c != '{' && c != '}') out += lower(c);
  }
  return out;
}

// The letter of a multiple-choice answer: "B", "(B)", "b)", "(b)."; else 0.
char choice_letter(std::string_view s, bool any_case) {
  while (!s.empty() && (s.front() == '(' || s.front() == '{')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ')' || s.back() == '}' || s.back() == '.' || s.back() == ':')) {
    s.remove_suffix(1);
  }
  if (s.size() != 1) return 0;
  const char c = any_case ? static_cast<char>(s[0] >= 'a' && s[0] <= 'z' ? s[0] - 32 : s[0]) : s[0];
  return c >= 'A' && c <= 'E' ? c : 0;
}

// ---------------------------------------------------------------------------------------------
// Reading: an Answer tree, with expressions as Node trees (no GiNaC yet).

struct Node {
  enum class Op {
    kNumber,  // text: "12" or "12.5"
    kSymbol,  // text: its name
    kPi,
    kE,
    kI,
    kInfinity,
    kAdd,        // args: terms
    kNeg,        // args: {x}
    kMul,        // args: factors
    kDiv,        // args: {numerator, denominator}
    kPow,        // args: {base, exponent}
    kRoot,       // args: {x, index}
    kFactorial,  // args: {n}
    kBinomial,   // args: {n, k}
    kAbs,        // args: {x}
    kFunction,   // text: name; args: {x} (log with a base: {x, base})
  };
  Op op = Op::kNumber;
  std::string text;
  std::vector<Node> args;
  bool from_frac = false;  // a \frac of two integers (for mixed numbers)
};

bool is_integer_literal(const Node& n) {
  return n.op == Node::Op::kNumber && n.text.find('.') == std::string::npos;
}

const std::unordered_set<std::string_view>& greek_letters() {
  static const std::unordered_set<std::string_view> names = {
      "alpha",    "beta",    "gamma", "delta",  "epsilon", "varepsilon", "zeta",  "eta",   "theta",
      "vartheta", "iota",    "kappa", "lambda", "mu",      "nu",         "xi",    "rho",   "sigma",
      "tau",      "upsilon", "phi",   "varphi", "chi",     "psi",        "omega", "Gamma", "Delta",
      "Theta",    "Lambda",  "Xi",    "Sigma",  "Phi",     "Psi",        "Omega"};
  return names;
}

// A recursive-descent parser for one expression, bounded in depth and size:
//   sum    := term (('+' | '-') term)*
//   term   := factor (('*' | '/') factor | implicit-factor)*
//   factor := ('-' | '+') factor | power
//   power  := postfix ('^' exponent)?         exponents are right-associative
//   postfix:= primary '!'*
//   primary:= number | letter[_sub] | function '(' sum ')' | (sum) | [sum] | {sum} | |sum|
//           | \frac A B | \sqrt[n] A | \binom A B | \pi | \infty | \greek | \function arg
class ExprParser {
 public:
  explicit ExprParser(std::string_view s) : s_(s) {}

  Node parse() {
    Node n = sum();
    skip_spaces();
    if (pos_ != s_.size()) fail_here("unexpected");
    return n;
  }

 private:
  class DepthGuard {
   public:
    explicit DepthGuard(ExprParser& p) : p_(p) {
      if (++p_.depth_ > kMaxParserDepth) throw Unreadable{"nested too deeply"};
    }
    ~DepthGuard() { --p_.depth_; }

   private:
    ExprParser& p_;
  };

  [[noreturn]] void fail_here(std::string_view what) const {
    if (pos_ >= s_.size()) throw Unreadable{fmt::format("{} end of expression", what)};
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c < 0x20 || c >= 0x7f) throw Unreadable{fmt::format("{} byte 0x{:02x}", what, c)};
    throw Unreadable{fmt::format("{} '{}' at {}", what, static_cast<char>(c), pos_)};
  }

  Node make(Node::Op op, std::vector<Node> args = {}, std::string text = {}) {
    if (++nodes_ > kMaxNodes) throw Unreadable{"expression too large"};
    Node n;
    n.op = op;
    n.args = std::move(args);
    n.text = std::move(text);
    return n;
  }

  void skip_spaces() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }
  char peek() {
    skip_spaces();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  void expect(char c) {
    if (peek() != c) fail_here(fmt::format("expected '{}', found", c));
    ++pos_;
  }
  // The command name at pos_ ("frac" for "\frac"), or "" when there is none.
  std::string_view command_at() const {
    if (pos_ >= s_.size() || s_[pos_] != '\\') return {};
    size_t end = pos_ + 1;
    while (end < s_.size() && is_letter(s_[end])) ++end;
    return s_.substr(pos_ + 1, end - pos_ - 1);
  }

  Node sum() {
    DepthGuard guard(*this);
    std::vector<Node> terms;
    terms.push_back(term());
    while (true) {
      const char c = peek();
      if (c != '+' && c != '-') break;
      ++pos_;
      Node t = term();
      terms.push_back(c == '-' ? make(Node::Op::kNeg, {std::move(t)}) : std::move(t));
    }
    if (terms.size() == 1) return std::move(terms[0]);
    return make(Node::Op::kAdd, std::move(terms));
  }

  bool starts_implicit_factor() {
    const char c = peek();
    if (is_letter(c) || c == '(' || c == '{') return true;
    if (c == '|') return abs_depth_ == 0;
    if (c != '\\') return false;
    const std::string_view name = command_at();
    return name == "frac" || name == "sqrt" || name == "binom" || name == "pi" || name == "infty" ||
           function_names().count(name) || greek_letters().count(name);
  }

  Node term() {
    std::vector<Node> factors;
    factors.push_back(factor());
    const bool mixed_candidate = is_integer_literal(factors[0]);
    while (true) {
      const char c = peek();
      if (c == '*' && !(pos_ + 1 < s_.size() && s_[pos_ + 1] == '*')) {
        ++pos_;
        factors.push_back(factor());
      } else if (c == '/') {
        ++pos_;
        Node denominator = factor();
        Node numerator =
            factors.size() == 1 ? std::move(factors[0]) : make(Node::Op::kMul, std::move(factors));
        factors.clear();
        factors.push_back(make(Node::Op::kDiv, {std::move(numerator), std::move(denominator)}));
      } else if (starts_implicit_factor()) {
        Node next = power();
        // "2\frac{1}{2}" is the mixed number 5/2, not 2 * 1/2.
        if (mixed_candidate && factors.size() == 1 && next.from_frac) {
          return make(Node::Op::kAdd, {std::move(factors[0]), std::move(next)});
        }
        factors.push_back(std::move(next));
      } else {
        break;
      }
    }
    if (factors.size() == 1) return std::move(factors[0]);
    return make(Node::Op::kMul, std::move(factors));
  }

  Node factor() {
    DepthGuard guard(*this);
    const char c = peek();
    if (c == '-') {
      ++pos_;
      return make(Node::Op::kNeg, {factor()});
    }
    if (c == '+') {
      ++pos_;
      return factor();
    }
    return power();
  }

  bool at_power_sign() {
    const char c = peek();
    return c == '^' || (c == '*' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '*');
  }

  Node power() {
    Node base = postfix();
    if (!at_power_sign()) return base;
    pos_ += s_[pos_] == '^' ? 1 : 2;
    return make(Node::Op::kPow, {std::move(base), exponent()});
  }

  Node exponent() {
    DepthGuard guard(*this);
    Node e = exponent_atom();
    if (!at_power_sign()) return e;
    pos_ += s_[pos_] == '^' ? 1 : 2;
    return make(Node::Op::kPow, {std::move(e), exponent()});
  }

  Node exponent_atom() {
    const char c = peek();
    if (c == '{' || c == '(') {
      ++pos_;
      Node n = sum();
      expect(c == '{' ? '}' : ')');
      return n;
    }
    if (c == '-' || c == '+') {
      ++pos_;
      Node n = exponent_atom();
      return c == '-' ? make(Node::Op::kNeg, {std::move(n)}) : n;
    }
    if (is_digit(c) || c == '.') return number();
    if (is_letter(c)) return letter();
    if (c == '\\') return primary();
    fail_here("unexpected exponent");
  }

  Node postfix() {
    Node n = primary();
    while (peek() == '!') {
      ++pos_;
      n = make(Node::Op::kFactorial, {std::move(n)});
    }
    return n;
  }

  Node number() {
    skip_spaces();
    const size_t start = pos_;
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '.' && pos_ + 1 < s_.size() && is_digit(s_[pos_ + 1])) {
      ++pos_;
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    }
    if (pos_ == start) fail_here("expected a number at");
    return make(Node::Op::kNumber, {}, std::string(s_.substr(start, pos_ - start)));
  }

  // One letter (with an optional subscript), or a plain function call such as "sqrt(2)".
  Node letter() {
    skip_spaces();
    size_t end = pos_;
    while (end < s_.size() && is_letter(s_[end])) ++end;
    const std::string_view word = s_.substr(pos_, end - pos_);
    if (end < s_.size() && s_[end] == '(' && is_plain_function(word)) {
      pos_ = end + 1;
      Node arg = sum();
      expect(')');
      if (word == "sqrt") return make(Node::Op::kRoot, {std::move(arg), make_int(2)});
      if (word == "abs") return make(Node::Op::kAbs, {std::move(arg)});
      return make(Node::Op::kFunction, {std::move(arg)}, std::string(word));
    }
    const char c = s_[pos_++];
    std::string name(1, c);
    if (pos_ < s_.size() && s_[pos_] == '_') {
      ++pos_;
      if (pos_ < s_.size() && s_[pos_] == '{') {
        name += "_" + std::string(read_group(s_, pos_));
      } else if (pos_ < s_.size() && (is_letter(s_[pos_]) || is_digit(s_[pos_]))) {
        name += "_" + std::string(1, s_[pos_++]);
      } else {
        fail_here("expected a subscript at");
      }
      return make(Node::Op::kSymbol, {}, name);
    }
    if (c == 'e') return make(Node::Op::kE);
    if (c == 'i') return make(Node::Op::kI);
    return make(Node::Op::kSymbol, {}, name);
  }

  Node make_int(int v) { return make(Node::Op::kNumber, {}, std::to_string(v)); }

  // The argument of \frac, \sqrt, \binom: a {group}, or a single character as in \frac12.
  Node argument() {
    const char c = peek();
    if (c == '{') {
      ++pos_;
      Node n = sum();
      expect('}');
      return n;
    }
    if (is_digit(c)) return make(Node::Op::kNumber, {}, std::string(1, s_[pos_++]));
    if (is_letter(c)) {
      ++pos_;
      if (c == 'e') return make(Node::Op::kE);
      if (c == 'i') return make(Node::Op::kI);
      return make(Node::Op::kSymbol, {}, std::string(1, c));
    }
    if (c == '\\') return primary();
    fail_here("expected an argument, found");
  }

  Node primary() {
    DepthGuard guard(*this);
    const char c = peek();
    if (is_digit(c) || c == '.') return number();
    if (is_letter(c)) return letter();
    if (c == '(' || c == '[' || c == '{') {
      ++pos_;
      Node n = sum();
      expect(c == '(' ? ')' : c == '[' ? ']' : '}');
      n.from_frac = false;  // 11(\frac{3}{2}) is a product, not a mixed number
      return n;
    }
    if (c == '|') {
      ++pos_;
      ++abs_depth_;
      Node n = sum();
      expect('|');
      --abs_depth_;
      return make(Node::Op::kAbs, {std::move(n)});
    }
    if (c != '\\') fail_here("unexpected");
    const std::string_view name = command_at();
    if (name.empty()) fail_here("unexpected");
    pos_ += 1 + name.size();
    if (name == "frac") {
      Node numerator = argument();
      Node denominator = argument();
      const bool integers = is_integer_literal(numerator) && is_integer_literal(denominator);
      Node n = make(Node::Op::kDiv, {std::move(numerator), std::move(denominator)});
      n.from_frac = integers;
      return n;
    }
    if (name == "sqrt") {
      Node index = make_int(2);
      if (peek() == '[') {
        ++pos_;
        index = sum();
        expect(']');
      }
      Node x = argument();
      return make(Node::Op::kRoot, {std::move(x), std::move(index)});
    }
    if (name == "binom") {
      Node n = argument();
      Node k = argument();
      return make(Node::Op::kBinomial, {std::move(n), std::move(k)});
    }
    if (name == "pi") return make(Node::Op::kPi);
    if (name == "infty") return make(Node::Op::kInfinity);
    if (greek_letters().count(name)) return make(Node::Op::kSymbol, {}, std::string(name));
    if (function_names().count(name)) return function(name);
    throw Unreadable{fmt::format("unsupported command \\{}", name)};
  }

  // \sin x, \sin(x), \sin^2 x, \log_2 8, \ln{x}
  Node function(std::string_view name) {
    std::optional<Node> exponent_of_result;
    std::optional<Node> base;
    for (int k = 0; k < 2; ++k) {
      // LaTeX scripts: one character unless braced ("\log_28" is log base 2 of 8).
      if (peek() == '^' && !exponent_of_result) {
        ++pos_;
        exponent_of_result = argument();
      } else if (peek() == '_' && name == "log" && !base) {
        ++pos_;
        base = argument();
      }
    }
    Node arg;
    if (peek() == '(') {
      ++pos_;
      arg = sum();
      expect(')');
    } else {
      arg = power();
    }
    std::vector<Node> args;
    args.push_back(std::move(arg));
    if (base) args.push_back(std::move(*base));
    Node f = make(Node::Op::kFunction, std::move(args), std::string(name));
    if (exponent_of_result)
      return make(Node::Op::kPow, {std::move(f), std::move(*exponent_of_result)});
    return f;
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  int abs_depth_ = 0;
  size_t nodes_ = 0;
};

struct Answer {
  enum class Kind { kExpression, kTuple, kSet, kUnion, kRelation };
  Kind kind = Kind::kExpression;
  Node expr;                           // kExpression
  bool percent = false;                // kExpression: written with a trailing %
  std::vector<Answer> items;           // elements, or the sides of a relation
  std::vector<std::string> relations;  // kRelation: the operators between the sides
  std::string open, close;             // kTuple: its brackets
};

const char* kind_name(const Answer& a) {
  switch (a.kind) {
    case Answer::Kind::kExpression:
      return "a number or expression";
    case Answer::Kind::kTuple:
      return "a tuple or interval";
    case Answer::Kind::kSet:
      return "a set or list";
    case Answer::Kind::kUnion:
      return "a union";
    case Answer::Kind::kRelation:
      return "a relation";
  }
  return "?";
}

// Length of the opening (closing) bracket at s[i], or 0.
size_t opener_at(std::string_view s, size_t i) {
  if (s[i] == '(' || s[i] == '[' || s[i] == '{') return 1;
  return s.compare(i, 2, "\\{") == 0 ? 2 : 0;
}
size_t closer_at(std::string_view s, size_t i) {
  if (s[i] == ')' || s[i] == ']' || s[i] == '}') return 1;
  return s.compare(i, 2, "\\}") == 0 ? 2 : 0;
}

// Splits s at the delimiters found by `delimiter_at` (returning their length, 0 for none) outside
// brackets, collecting the delimiters. Brackets of any kind pair up, so "[1, 2)" is one part.
template <typename DelimiterAt>
std::vector<std::string_view> split_top_level(std::string_view s, DelimiterAt delimiter_at,
                                              std::vector<std::string>* delimiters = nullptr) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    if (const size_t n = opener_at(s, i)) {
      if (++depth > kMaxNesting) throw Unreadable{"nested too deeply"};
      i += n;
      continue;
    }
    if (const size_t n = closer_at(s, i)) {
      if (--depth < 0) throw Unreadable{"unbalanced brackets"};
      i += n;
      continue;
    }
    if (depth == 0) {
      if (const size_t n = delimiter_at(s, i)) {
        parts.push_back(s.substr(start, i - start));
        if (delimiters) delimiters->emplace_back(s.substr(i, n));
        i += n;
        start = i;
        continue;
      }
    }
    // Skip whole command names, so that "\left" is not read as "\le" + "ft".
    if (s[i] == '\\' && i + 1 < s.size() && is_letter(s[i + 1])) {
      ++i;
      while (i < s.size() && is_letter(s[i])) ++i;
      continue;
    }
    ++i;
  }
  if (depth != 0) throw Unreadable{"unbalanced brackets"};
  parts.push_back(s.substr(start));
  return parts;
}

size_t command_length(std::string_view s, size_t i, std::string_view name) {
  if (s[i] != '\\' || s.compare(i + 1, name.size(), name) != 0) return 0;
  const size_t end = i + 1 + name.size();
  if (end < s.size() && is_letter(s[end])) return 0;
  return end - i;
}

size_t comma_at(std::string_view s, size_t i) { return s[i] == ',' ? 1 : 0; }
size_t union_at(std::string_view s, size_t i) { return command_length(s, i, "cup"); }
size_t relation_at(std::string_view s, size_t i) {
  if (s[i] == '=' || s[i] == '<' || s[i] == '>') return 1;
  for (std::string_view name : {"le", "ge", "ne", "in"}) {
    if (const size_t n = command_length(s, i, name)) return n;
  }
  return 0;
}

// Whether the bracket opening at s[0] closes at the very end of s.
bool enclosed(std::string_view s) {
  if (s.empty() || !opener_at(s, 0)) return false;
  int depth = 0;
  for (size_t i = 0; i < s.size();) {
    if (const size_t n = opener_at(s, i)) {
      ++depth;
      i += n;
    } else if (const size_t n = closer_at(s, i)) {
      if (--depth == 0) return i + n == s.size();
      i += n;
    } else {
      ++i;
    }
  }
  return false;
}

Answer parse_answer(std::string_view s, int depth);

Answer collection(Answer::Kind kind, const std::vector<std::string_view>& parts, int depth) {
  if (parts.size() > kMaxItems) throw Unreadable{fmt::format("more than {} elements", kMaxItems)};
  Answer a;
  a.kind = kind;
  for (std::string_view part : parts) a.items.push_back(parse_answer(part, depth + 1));
  return a;
}

Answer parse_answer(std::string_view s, int depth) {
  s = trim(s);
  if (s.empty()) throw Unreadable{"an empty part"};
  if (depth > kMaxAnswerDepth) throw Unreadable{"nested too deeply"};

  const auto items = split_top_level(s, comma_at);
  if (items.size() > 1) return collection(Answer::Kind::kSet, items, depth);

  // a \pm b: both values, as a set.
  for (std::string_view pm : {"\\pm", "\\mp"}) {
    const size_t at = s.find(pm);
    if (at != std::string_view::npos && s.find(pm, at + 1) == std::string_view::npos &&
        command_length(s, at, pm.substr(1))) {
      const std::string plus = std::string(s.substr(0, at)) + "+" + std::string(s.substr(at + 3));
      const std::string minus = std::string(s.substr(0, at)) + "-" + std::string(s.substr(at + 3));
      Answer a;
      a.kind = Answer::Kind::kSet;
      a.items.push_back(parse_answer(plus, depth + 1));
      a.items.push_back(parse_answer(minus, depth + 1));
      return a;
    }
  }

  const auto pieces = split_top_level(s, union_at);
  if (pieces.size() > 1) return collection(Answer::Kind::kUnion, pieces, depth);

  std::vector<std::string> relations;
  const auto sides = split_top_level(s, relation_at, &relations);
  if (sides.size() > 1) {
    Answer a = collection(Answer::Kind::kRelation, sides, depth);
    a.relations = std::move(relations);
    return a;
  }

  if (enclosed(s)) {
    const size_t open = opener_at(s, 0);
    const size_t close = s.back() == '}' && s.size() >= 2 && s[s.size() - 2] == '\\' ? 2 : 1;
    const std::string_view inner = s.substr(open, s.size() - open - close);
    const auto elements = split_top_level(inner, comma_at);
    // \{1, 2\} is a set; so is {1, 2} (plain braces are invisible in LaTeX: a list).
    if (open == 2 || s[0] == '{') return collection(Answer::Kind::kSet, elements, depth);
    if (elements.size() > 1) {
      Answer a = collection(Answer::Kind::kTuple, elements, depth);
      a.open = std::string(s.substr(0, open));
      a.close = std::string(s.substr(s.size() - close));
      return a;
    }
  }

  Answer a;
  if (s.back() == '%') {
    a.percent = true;
    s.remove_suffix(1);
  }
  a.expr = ExprParser(s).parse();
  return a;
}

// ---------------------------------------------------------------------------------------------
// Deciding, with GiNaC

bool has_symbols(const GiNaC::ex& e) {
  for (auto it = e.preorder_begin(); it != e.preorder_end(); ++it) {
    if (GiNaC::is_a<GiNaC::symbol>(*it)) return true;
  }
  return false;
}

long bits_of(const GiNaC::numeric& n) {
  if (!n.is_rational()) return 0;
  return std::max<long>(n.numer().int_length(), n.denom().int_length());
}

// Whether 0^exponent is a number: GiNaC's power::eval throws for 1/0, 0^0 and 0^i, and leaks the
// object it was building when it does, a few dozen bytes a validator would lose for good on every
// such answer a worker writes. So no power with a base of 0 reaches GiNaC unless this holds: an
// exponent with a positive real part (0^x with x unknown may become one of those later).
bool zero_power_is_defined(const GiNaC::ex& exponent) {
  return GiNaC::is_a<GiNaC::numeric>(exponent) &&
         GiNaC::ex_to<GiNaC::numeric>(exponent).real().is_positive();
}

// The floating-point value of an expression, with given values for its symbols, computed bottom up
// here rather than by GiNaC's subs() and evalf(), whose powers may meet a base of 0 on the way
// (a pole at the point, or (cos^2 1 + sin^2 1 - 1)^-1 once evaluated): see zero_power_is_defined.
class Evaluator : public GiNaC::map_function {
 public:
  struct Undefined {};  // the expression has no value here

  explicit Evaluator(const GiNaC::exmap& point) : point_(point) {}

  GiNaC::ex operator()(const GiNaC::ex& e) override {
    if (GiNaC::is_a<GiNaC::symbol>(e)) {
      const auto it = point_.find(e);
      return it == point_.end() ? e : it->second;
    }
    if (GiNaC::is_a<GiNaC::numeric>(e) || GiNaC::is_a<GiNaC::constant>(e)) return GiNaC::evalf(e);
    if (GiNaC::is_a<GiNaC::power>(e)) {
      const GiNaC::ex base = (*this)(e.op(0));
      const GiNaC::ex exponent = (*this)(e.op(1));
      if (base.is_zero() && !zero_power_is_defined(exponent)) throw Undefined{};
      return GiNaC::pow(base, exponent);
    }
    if (GiNaC::is_a<GiNaC::function>(e)) {
      const auto& f = GiNaC::ex_to<GiNaC::function>(e);
      const std::string name = f.get_name();
      if (name != "sin" && name != "cos" && name != "tan") return GiNaC::evalf(e.map(*this));
      // sin(10^4000) needs 4000 digits of pi to evaluate, and at kDigits digits comes out as 0.
      static const GiNaC::numeric limit = GiNaC::pow(GiNaC::numeric(10), GiNaC::numeric(20));
      const GiNaC::ex argument = (*this)(e.op(0));
      if (GiNaC::is_a<GiNaC::numeric>(argument) &&
          GiNaC::abs(GiNaC::ex_to<GiNaC::numeric>(argument)) > limit) {
        throw Unreadable{fmt::format("{} of an argument beyond 1e20", name)};
      }
      return GiNaC::evalf(GiNaC::function(f.get_serial(), argument));
    }
    return e.map(*this);
  }

 private:
  const GiNaC::exmap& point_;
};

// e's value at `point` (its symbols' values); none where it is not a number there (a pole, a
// symbol without a value, a function undefined there). Unreadable for an expression whose value
// would be noise.
std::optional<GiNaC::numeric> value_at(const GiNaC::ex& e, const GiNaC::exmap& point) {
  try {
    Evaluator evaluate(point);
    const GiNaC::ex v = GiNaC::evalf(evaluate(e));
    if (!GiNaC::is_a<GiNaC::numeric>(v)) return std::nullopt;
    return GiNaC::ex_to<GiNaC::numeric>(v);
  } catch (const Evaluator::Undefined&) {
    return std::nullopt;
  } catch (const std::exception&) {  // a pole of a function: log(0), tan(pi/2)
    return std::nullopt;
  }
}

// Builds GiNaC expressions from Nodes, refusing work that could explode. Symbols of the same name
// are the same GiNaC symbol across both answers.
class Converter {
 public:
  bool inexact = false;  // a decimal literal was read

  GiNaC::ex convert(const Node& n) {
    using Op = Node::Op;
    switch (n.op) {
      case Op::kNumber:
        return number(n.text);
      case Op::kSymbol:
        return symbol(n.text);
      case Op::kPi:
        return GiNaC::Pi;
      case Op::kE:
        return GiNaC::exp(GiNaC::ex(1));
      case Op::kI:
        return GiNaC::I;
      case Op::kInfinity:
        return symbol("\\infty");
      case Op::kAdd: {
        GiNaC::ex sum = 0;
        for (const Node& t : n.args) sum += convert(t);
        return sum;
      }
      case Op::kNeg:
        return -convert(n.args[0]);
      case Op::kMul: {
        GiNaC::ex product = 1;
        for (const Node& f : n.args) product *= convert(f);
        return product;
      }
      case Op::kDiv:
        return convert(n.args[0]) * checked_power(convert(n.args[1]), -1);
      case Op::kPow:
        return checked_power(convert(n.args[0]), convert(n.args[1]));
      case Op::kRoot:
        return root(convert(n.args[0]), convert(n.args[1]));
      case Op::kAbs:
        return GiNaC::abs(convert(n.args[0]));
      case Op::kFactorial:
        return factorial(convert(n.args[0]));
      case Op::kBinomial:
        return binomial(convert(n.args[0]), convert(n.args[1]));
      case Op::kFunction:
        return function(n);
    }
    return 0;
  }

  std::vector<GiNaC::symbol> symbols() const {
    std::vector<GiNaC::symbol> out;
    for (const auto& [name, s] : symbols_) out.push_back(s);
    return out;
  }

 private:
  // "12" or "12.5" (read as the exact 25/2).
  GiNaC::ex number(std::string digits) {
    const size_t dot = digits.find('.');
    if (dot == std::string::npos) return integer_value(digits);
    inexact = true;
    const auto decimals = static_cast<long>(digits.size() - dot - 1);
    digits.erase(dot, 1);
    return integer_value(digits) / GiNaC::pow(GiNaC::numeric(10), GiNaC::numeric(decimals));
  }

  GiNaC::ex symbol(const std::string& name) {
    if (auto it = symbols_.find(name); it != symbols_.end()) return it->second;
    if (symbols_.size() >= kMaxSymbols) throw Unreadable{"too many different symbols"};
    return symbols_.emplace(name, GiNaC::symbol(name)).first->second;
  }

  static GiNaC::ex checked_power(const GiNaC::ex& base, const GiNaC::ex& exponent) {
    if (base.is_zero() && !zero_power_is_defined(exponent)) {
      if (exponent.is_zero()) throw Unreadable{"0^0 is undefined"};
      if (GiNaC::is_a<GiNaC::numeric>(exponent) &&
          GiNaC::ex_to<GiNaC::numeric>(exponent).real().is_negative()) {
        throw Unreadable{"division by zero"};
      }
      throw Unreadable{"0 to a power that is not a positive number"};
    }
    if (GiNaC::is_a<GiNaC::numeric>(exponent)) {
      const auto& k = GiNaC::ex_to<GiNaC::numeric>(exponent);
      const GiNaC::numeric magnitude = GiNaC::abs(k);
      bool trivial_base = false;
      if (GiNaC::is_a<GiNaC::numeric>(base)) {
        const auto& b = GiNaC::ex_to<GiNaC::numeric>(base);
        trivial_base = b.is_zero() || GiNaC::abs(b).is_equal(GiNaC::numeric(1));
        if (!trivial_base) {
          const long bits = std::max(bits_of(b.real()), bits_of(b.imag()));
          if (magnitude * GiNaC::numeric(bits) > GiNaC::numeric(kMaxNumberBits)) {
            throw Unreadable{fmt::format("a number beyond {} bits", kMaxNumberBits)};
          }
        }
      }
      if (!trivial_base && magnitude > GiNaC::numeric(kMaxExponent)) {
        throw Unreadable{
            fmt::format("exponent {} exceeds the limit {}", shorten(GiNaC::ex(k)), kMaxExponent)};
      }
      if (k.is_rational() && k.denom() > GiNaC::numeric(kMaxExponent)) {
        throw Unreadable{fmt::format("a root of degree beyond {}", kMaxExponent)};
      }
    } else if (!has_symbols(exponent)) {
      const std::optional<GiNaC::numeric> value = value_at(exponent, {});
      if (!value || GiNaC::abs(*value) > GiNaC::numeric(kMaxExponent)) {
        throw Unreadable{
            fmt::format("exponent {} exceeds the limit {}", shorten(exponent), kMaxExponent)};
      }
    }
    return GiNaC::pow(base, exponent);
  }

  // \sqrt[3]{-8} is -2 (the real root, as in school), not GiNaC's principal complex root.
  static GiNaC::ex root(const GiNaC::ex& x, const GiNaC::ex& index) {
    const bool odd =
        GiNaC::is_a<GiNaC::numeric>(index) && GiNaC::ex_to<GiNaC::numeric>(index).is_odd();
    if (odd && !has_symbols(x)) {
      const std::optional<GiNaC::numeric> value = value_at(x, {});
      if (value && value->is_real() && value->is_negative()) {
        return -checked_power(-x, 1 / index);
      }
    }
    return checked_power(x, 1 / index);
  }

  static std::string shorten(const GiNaC::ex& e) {
    std::ostringstream os;
    os << e;
    std::string s = os.str();
    if (s.size() > 24) s = s.substr(0, 21) + "...";
    return s;
  }

  static GiNaC::ex factorial(const GiNaC::ex& n) {
    if (GiNaC::is_a<GiNaC::numeric>(n)) {
      const auto& k = GiNaC::ex_to<GiNaC::numeric>(n);
      if (!k.is_nonneg_integer()) throw Unreadable{"factorial of a number that is not a natural"};
      if (k > GiNaC::numeric(kMaxFactorial))
        throw Unreadable{fmt::format("factorial beyond {}!", kMaxFactorial)};
      return GiNaC::factorial(k);
    }
    // A factorial of an expression with symbols cannot be evaluated at points, and where GiNaC
    // turns a point back into an exact integer it would compute (10^6)! exactly.
    if (has_symbols(n)) throw Unreadable{"factorial of an expression with symbols"};
    throw Unreadable{"factorial of a number that is not a natural"};
  }

  static GiNaC::ex binomial(const GiNaC::ex& n, const GiNaC::ex& k) {
    if (GiNaC::is_a<GiNaC::numeric>(n) && GiNaC::is_a<GiNaC::numeric>(k)) {
      const auto& nn = GiNaC::ex_to<GiNaC::numeric>(n);
      const auto& kk = GiNaC::ex_to<GiNaC::numeric>(k);
      const GiNaC::numeric limit(kMaxBinomialN);
      if (!nn.is_integer() || !kk.is_integer()) {
        throw Unreadable{"binomial of numbers that are not integers"};
      }
      if (GiNaC::abs(nn) > limit || GiNaC::abs(kk) > limit) {
        throw Unreadable{fmt::format("binomial beyond n = {}", kMaxBinomialN)};
      }
      return GiNaC::binomial(nn, kk);
    }
    // binomial(x, k) for an integer k is a polynomial of degree k (GiNaC expands it); other
    // forms are refused for the reasons of factorial() above.
    if (!GiNaC::is_a<GiNaC::numeric>(k) || !GiNaC::ex_to<GiNaC::numeric>(k).is_integer() ||
        !has_symbols(n)) {
      throw Unreadable{"binomial other than of an expression and an integer"};
    }
    if (GiNaC::abs(GiNaC::ex_to<GiNaC::numeric>(k)) > GiNaC::numeric(kMaxSymbolicBinomialK)) {
      throw Unreadable{fmt::format("binomial beyond k = {}", kMaxSymbolicBinomialK)};
    }
    return GiNaC::binomial(n, k);
  }

  GiNaC::ex function(const Node& n) {
    const GiNaC::ex x = convert(n.args[0]);
    const std::string& f = n.text;
    if (f == "sin") return GiNaC::sin(x);
    if (f == "cos") return GiNaC::cos(x);
    if (f == "tan") return GiNaC::tan(x);
    if (f == "sec") return 1 / GiNaC::cos(x);
    if (f == "csc") return 1 / GiNaC::sin(x);
    if (f == "cot") return GiNaC::cos(x) / GiNaC::sin(x);
    if (f == "sinh") return GiNaC::sinh(x);
    if (f == "cosh") return GiNaC::cosh(x);
    if (f == "tanh") return GiNaC::tanh(x);
    if (f == "arcsin") return GiNaC::asin(x);
    if (f == "arccos") return GiNaC::acos(x);
    if (f == "arctan") return GiNaC::atan(x);
    if (f == "exp") return GiNaC::exp(x);
    if (f == "ln" || f == "log") {
      if (n.args.size() == 2) return GiNaC::log(x) / GiNaC::log(convert(n.args[1]));
      return GiNaC::log(x);
    }
    throw Unreadable{fmt::format("unsupported function {}", f)};
  }

  std::map<std::string, GiNaC::symbol> symbols_;
};

// An upper bound on the number of terms of the expanded expression: (a + b)^n has n + 1.
double expansion_terms(const GiNaC::ex& e) {
  constexpr double kCap = 1e12;
  if (GiNaC::is_a<GiNaC::add>(e)) {
    double sum = 0;
    for (size_t i = 0; i < e.nops(); ++i) sum = std::min(kCap, sum + expansion_terms(e.op(i)));
    return sum;
  }
  if (GiNaC::is_a<GiNaC::mul>(e)) {
    double product = 1;
    for (size_t i = 0; i < e.nops(); ++i) {
      product = std::min(kCap, product * expansion_terms(e.op(i)));
    }
    return product;
  }
  if (GiNaC::is_a<GiNaC::power>(e)) {
    const double t = expansion_terms(e.op(0));
    const GiNaC::ex& k = e.op(1);
    if (t <= 1 || !GiNaC::is_a<GiNaC::numeric>(k) ||
        !GiNaC::ex_to<GiNaC::numeric>(k).is_integer()) {
      return t;
    }
    const double n = std::fabs(GiNaC::ex_to<GiNaC::numeric>(k).to_double());
    // Monomials of degree n in t terms: C(t + n - 1, n).
    const double log_count = std::lgamma(t + n) - std::lgamma(n + 1) - std::lgamma(t);
    return log_count > std::log(kCap) ? kCap : std::exp(log_count);
  }
  return 1;
}

// How many indeterminates normal() would see in e (symbols, and functions and non-integer powers,
// which it treats as symbols), counting up to `cap` + 1. Its multivariate gcds take time that grows
// steeply with them: a reply of 800 characters in eight symbols and a few sines took 2.5 s.
size_t indeterminates(const GiNaC::ex& e, size_t cap) {
  GiNaC::exset seen;
  for (auto it = e.preorder_begin(); it != e.preorder_end() && seen.size() <= cap; ++it) {
    const bool atom =
        GiNaC::is_a<GiNaC::symbol>(*it) || GiNaC::is_a<GiNaC::function>(*it) ||
        (GiNaC::is_a<GiNaC::power>(*it) && !(GiNaC::is_a<GiNaC::numeric>(it->op(1)) &&
                                             GiNaC::ex_to<GiNaC::numeric>(it->op(1)).is_integer()));
    if (atom) seen.insert(*it);
  }
  return seen.size();
}

// Whether e is a rational function of its symbols with exact rational coefficients, so that
// normal() decides equality by itself.
bool is_rational_function(const GiNaC::ex& e) {
  if (GiNaC::is_a<GiNaC::symbol>(e)) return true;
  if (GiNaC::is_a<GiNaC::numeric>(e)) return GiNaC::ex_to<GiNaC::numeric>(e).is_rational();
  if (GiNaC::is_a<GiNaC::add>(e) || GiNaC::is_a<GiNaC::mul>(e)) {
    for (size_t i = 0; i < e.nops(); ++i) {
      if (!is_rational_function(e.op(i))) return false;
    }
    return true;
  }
  if (GiNaC::is_a<GiNaC::power>(e)) {
    return is_rational_function(e.op(0)) && GiNaC::is_a<GiNaC::numeric>(e.op(1)) &&
           GiNaC::ex_to<GiNaC::numeric>(e.op(1)).is_integer();
  }
  return false;
}

// Whether two values agree at `point`: |a - b| <= rel * max(|a|, |b|) + abs. None when either is
// not a number there.
std::optional<bool> close_values(const GiNaC::ex& a, const GiNaC::ex& b, bool inexact,
                                 const GiNaC::exmap& point = {}) {
  const std::optional<GiNaC::numeric> va = value_at(a, point);
  const std::optional<GiNaC::numeric> vb = value_at(b, point);
  if (!va || !vb) return std::nullopt;
  const GiNaC::numeric& na = *va;
  const GiNaC::numeric& nb = *vb;
  // Exact values are evaluated with kDigits digits, so only rounding separates equal ones.
  static const GiNaC::numeric exact_rel = GiNaC::pow(GiNaC::numeric(10), GiNaC::numeric(-25));
  static const GiNaC::numeric exact_abs = GiNaC::pow(GiNaC::numeric(10), GiNaC::numeric(-30));
  const GiNaC::numeric rel = inexact ? GiNaC::numeric(1, 1000000) : exact_rel;
  const GiNaC::numeric abs = inexact ? GiNaC::numeric(1, 1000000000) : exact_abs;
  return GiNaC::abs(na - nb) <= rel * std::max(GiNaC::abs(na), GiNaC::abs(nb)) + abs;
}

class Decider {
 public:
  MathVerdict equal(const Answer& given, const Answer& expected) {
    using Kind = Answer::Kind;
    // A one-element set is its element.
    if (given.kind == Kind::kSet && given.items.size() == 1 && expected.kind != Kind::kSet) {
      return equal(given.items[0], expected);
    }
    if (expected.kind == Kind::kSet && expected.items.size() == 1 && given.kind != Kind::kSet) {
      return equal(given, expected.items[0]);
    }
    const auto is_binding = [](const Answer& a) {  // "x = ..." or "x \in ..."
      return a.kind == Kind::kRelation && a.relations.back() != "<" && a.relations.back() != ">" &&
             a.relations.back() != "\\le" && a.relations.back() != "\\ge" &&
             a.relations.back() != "\\ne";
    };
    if (given.kind == Kind::kRelation && expected.kind != Kind::kRelation) {
      if (!is_binding(given)) return {false, "a relation, not the expected value"};
      return equal(given.items.back(), expected);
    }
    if (expected.kind == Kind::kRelation && given.kind != Kind::kRelation) {
      const Answer& lhs = expected.items[0];
      if (expected.items.size() == 2 && is_binding(expected) && lhs.kind == Kind::kExpression &&
          lhs.expr.op == Node::Op::kSymbol) {
        return equal(given, expected.items[1]);
      }
      return {false, "not the expected relation"};
    }
    if (given.kind != expected.kind) {
      return {false, fmt::format("{}, not {}", kind_name(given), kind_name(expected))};
    }
    switch (expected.kind) {
      case Kind::kExpression:
        return scalars(given, expected);
      case Kind::kTuple:
        if (given.open != expected.open || given.close != expected.close) {
          return {false, fmt::format("brackets {}{} instead of {}{}", given.open, given.close,
                                     expected.open, expected.close)};
        }
        return in_order(given, expected);
      case Kind::kRelation: {
        if (given.relations != expected.relations) return {false, "different relation"};
        MathVerdict v = in_order(given, expected);
        if (v.equal || given.items.size() != 2 || given.relations[0] != "=") return v;
        Answer swapped = given;  // a = b is b = a
        std::swap(swapped.items[0], swapped.items[1]);
        return in_order(swapped, expected);
      }
      case Kind::kSet:
      case Kind::kUnion:
        return unordered(given, expected);
    }
    return {false, "?"};
  }

  MathVerdict in_order(const Answer& given, const Answer& expected) {
    if (given.items.size() != expected.items.size()) {
      return {false,
              fmt::format("{} elements instead of {}", given.items.size(), expected.items.size())};
    }
    for (size_t i = 0; i < given.items.size(); ++i) {
      MathVerdict v = equal(given.items[i], expected.items[i]);
      if (!v.equal) return {false, fmt::format("element {}: {}", i + 1, v.detail)};
    }
    return {true, "equal element by element"};
  }

  MathVerdict unordered(const Answer& given, const Answer& expected) {
    if (given.items.size() != expected.items.size()) {
      return {false,
              fmt::format("{} elements instead of {}", given.items.size(), expected.items.size())};
    }
    std::vector<bool> used(expected.items.size(), false);
    for (size_t i = 0; i < given.items.size(); ++i) {
      bool matched = false;
      for (size_t j = 0; j < expected.items.size() && !matched; ++j) {
        if (!used[j] && equal(given.items[i], expected.items[j]).equal) used[j] = matched = true;
      }
      if (!matched) return {false, fmt::format("element {} is not expected", i + 1)};
    }
    return {true, "same elements in any order"};
  }

  MathVerdict scalars(const Answer& given, const Answer& expected) {
    converter_.inexact = false;
    const GiNaC::ex g = converter_.convert(given.expr);
    const GiNaC::ex e = converter_.convert(expected.expr);
    const bool inexact = converter_.inexact;
    if (given.percent == expected.percent) return values(g, e, inexact);
    // One side has %: it may be a unit (50% = 50) or a value (50% = 0.5).
    const GiNaC::ex& with = given.percent ? g : e;
    const GiNaC::ex& without = given.percent ? e : g;
    MathVerdict v = values(with, without, inexact);
    if (v.equal) return {true, v.detail + ", reading % as a unit"};
    v = values(with / 100, without, inexact);
    if (v.equal) return {true, v.detail + ", reading % as 1/100"};
    return v;
  }

  MathVerdict values(const GiNaC::ex& a, const GiNaC::ex& b, bool inexact) {
    const GiNaC::ex d = a - b;
    if (d.is_zero()) return {true, "symbolically equal"};
    const bool symbolic = has_symbols(a) || has_symbols(b);
    if (expansion_terms(a) + expansion_terms(b) <= kMaxExpansionTerms &&
        indeterminates(d, kMaxNormalIndeterminates) <= kMaxNormalIndeterminates) {
      const GiNaC::ex simplified = GiNaC::normal(d);
      if (simplified.is_zero()) return {true, "symbolically equal"};
      if (!inexact && is_rational_function(a) && is_rational_function(b)) {
        return {false, symbolic ? "different expressions" : "different values"};
      }
    }
    if (!symbolic) {
      const auto close = close_values(a, b, inexact);
      if (!close) return {false, "could not evaluate"};
      if (*close)
        return {true, inexact ? "equal within the decimal tolerance" : "numerically equal"};
      return {false, "different values"};
    }
    return at_points(a, b, inexact);
  }

  // Expressions with symbols: compare their values at kPoints fixed points (in (0.2, 1.8), a
  // different one for each symbol), skipping points where either is undefined.
  MathVerdict at_points(const GiNaC::ex& a, const GiNaC::ex& b, bool inexact) {
    const auto symbols = converter_.symbols();
    int valid = 0;
    for (int p = 0; p < kPoints; ++p) {
      GiNaC::exmap point;
      for (size_t j = 0; j < symbols.size(); ++j) {
        long numerator = 13 + static_cast<long>((37 * p + 61 * j + 11) % 97);
        if (numerator % 61 == 0) ++numerator;  // never an integer: see Converter::factorial
        // Floats, not exact rationals: x^(10^38 y) at an exact point would be computed exactly.
        point[symbols[j]] = GiNaC::evalf(GiNaC::numeric(numerator, 61));
      }
      const std::optional<bool> close = close_values(a, b, inexact, point);
      if (!close) continue;  // either is undefined at this point
      if (!*close) return {false, "different expressions"};
      ++valid;
    }
    if (valid < kMinValidPoints) return {false, "could not evaluate the expressions"};
    return {true, "numerically equal"};
  }

 private:
  Converter converter_;
};

// ---------------------------------------------------------------------------------------------
// Simplified form (MathOptions::require_simplified)

// Whether the expression denotes a rational number by rational arithmetic alone.
bool rational_only(const Node& n) {
  using Op = Node::Op;
  switch (n.op) {
    case Op::kNumber:
      return true;
    case Op::kNeg:
    case Op::kAdd:
    case Op::kMul:
    case Op::kDiv:
    case Op::kFactorial:
    case Op::kBinomial:
      return std::all_of(n.args.begin(), n.args.end(), rational_only);
    case Op::kPow: {
      const Node& e = n.args[1].op == Op::kNeg ? n.args[1].args[0] : n.args[1];
      return rational_only(n.args[0]) && is_integer_literal(e);
    }
    default:
      return false;
  }
}

std::optional<uint64_t> small_integer(const Node& n) {
  if (!is_integer_literal(n) || n.text.size() > 18) return std::nullopt;
  return std::stoull(n.text);
}

// An integer, a decimal, or a fraction of coprime integers, each optionally negated.
bool canonical_rational(const Node& n) {
  using Op = Node::Op;
  const Node& m = n.op == Op::kNeg ? n.args[0] : n;
  if (m.op == Op::kNumber) return true;
  if (m.op != Op::kDiv) return false;
  const Node& top = m.args[0].op == Op::kNeg ? m.args[0].args[0] : m.args[0];
  const auto p = small_integer(top);
  const auto q = small_integer(m.args[1]);
  return p && q && *q > 1 && std::gcd(*p, *q) == 1;
}

bool holds_root(const Node& n) {
  if (n.op == Node::Op::kRoot) return true;
  return std::any_of(n.args.begin(), n.args.end(), holds_root);
}

std::optional<std::string> unsimplified_part(const Node& n) {
  using Op = Node::Op;
  if (rational_only(n)) {
    if (canonical_rational(n)) return std::nullopt;
    return "an exact number is not written as one integer, decimal or fraction in lowest terms";
  }
  if (n.op == Op::kRoot && n.args[1].op == Op::kNumber && n.args[1].text == "2") {
    if (const auto radicand = small_integer(n.args[0])) {
      for (uint64_t f = 2; f <= 10000 && f * f <= *radicand; ++f) {
        if (*radicand % (f * f) == 0) {
          return fmt::format("\\sqrt{{{}}} has the square factor {}", *radicand, f * f);
        }
      }
    }
  }
  if (n.op == Op::kDiv && holds_root(n.args[1])) return "a root is left in a denominator";
  for (const Node& child : n.args) {
    if (auto why = unsimplified_part(child)) return why;
  }
  return std::nullopt;
}

std::optional<std::string> unsimplified_part(const Answer& a) {
  if (a.kind == Answer::Kind::kExpression) return unsimplified_part(a.expr);
  for (const Answer& item : a.items) {
    if (auto why = unsimplified_part(item)) return why;
  }
  return std::nullopt;
}

std::string sanitize_detail(std::string s) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return s;
}

// Called in a catch (...) block while reading an answer: the unequal verdict for the exception
// being handled, its reason after `prefix` (after `other_prefix` for one that is not ours).
// Exceptions of other types propagate.
MathVerdict unreadable(std::string_view prefix, std::optional<std::string_view> other_prefix = {}) {
  try {
    throw;
  } catch (const Unreadable& u) {
    return {false, sanitize_detail(std::string(prefix) + u.reason)};
  } catch (const std::exception& x) {
    return {false, sanitize_detail(std::string(other_prefix.value_or(prefix)) + x.what())};
  }
}

}  // namespace

std::optional<std::string> extract_boxed_answer(std::string_view completion) {
  if (completion.size() > kMaxScannedBytes) {
    completion = completion.substr(completion.size() - kMaxScannedBytes);
  }
  const size_t box = last_box(completion);
  if (box != std::string_view::npos) return boxed_argument(completion.substr(box));
  return answer_line(completion);
}

std::optional<std::string> normalize_math_answer(std::string_view answer) {
  try {
    return clean(trim(answer), 0);
  } catch (const Unreadable&) {
    return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

MathVerdict compare_math_answers(std::string_view given, std::string_view expected,
                                 const MathOptions& options) {
  std::string g, e;
  try {
    g = clean(trim(given), 0);
  } catch (...) {
    return unreadable("answer ", "");
  }
  try {
    e = clean(trim(expected), 0);
  } catch (...) {
    return unreadable("expected answer ", "");
  }
  if (g == e) return {true, "same after normalisation"};

  if (const char letter = choice_letter(e, false)) {
    const char given_letter = choice_letter(g, true);
    if (given_letter == letter) return {true, "same choice"};
    if (given_letter != 0) return {false, "a different choice"};
  }
  if (looks_like_text(g) || looks_like_text(e)) {
    if (text_key(g) == text_key(e)) return {true, "same text"};
    return {false, "different text"};
  }

  Answer given_answer, expected_answer;
  try {
    given_answer = parse_answer(g, 0);
  } catch (...) {
    return unreadable("unreadable answer: ");
  }
  try {
    expected_answer = parse_answer(e, 0);
  } catch (...) {
    return unreadable("unreadable expected answer: ");
  }

  MathVerdict verdict;
  std::lock_guard<std::mutex> lock(ginac_mutex());
  try {
    GiNaC::Digits = kDigits;
    Decider decider;
    verdict = decider.equal(given_answer, expected_answer);
  } catch (const Unreadable& u) {
    return {false, sanitize_detail(u.reason)};
  } catch (const std::exception& x) {
    const std::string what = x.what();
    if (what.find("division by zero") != std::string::npos) return {false, "division by zero"};
    return {false, sanitize_detail("could not evaluate: " + what)};
  } catch (...) {
    return {false, "could not evaluate"};
  }
  if (verdict.equal && options.require_simplified) {
    if (auto why = unsimplified_part(given_answer)) {
      verdict = {false, *why, true};
    }
  }
  return verdict;
}

}  // namespace trellis::env
