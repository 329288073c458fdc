// Math answers: pulling the final answer out of a model's reply and deciding whether it equals the
// expected answer, as written by people (LaTeX, as in MATH-style datasets) or by models.
//
// Extraction: the argument of the last \boxed{...} (or \fbox{...}, or "\boxed 5"); with no box,
// the last line labelled "Answer:" / "Final answer:" / "**Answer:**" / "The answer is" (case
// does not matter; a bare "Final Answer" heading takes the next line). Only the last 1 MiB of a
// reply is looked at: the final answer is at the end.
//
// Equality, in order:
//   1. Both answers are normalised (normalize_math_answer): LaTeX spacing, \left/\right, $, font
//      and \text{} wrappers, units, degrees and thousands separators go away; \dfrac becomes \frac
//      and so on. Equal normalised strings are equal answers (the fast path: no algebra at all).
//   2. Otherwise both are read into a structure (numbers and expressions, tuples, intervals, sets,
//      unions, relations) by a bounded parser of our own, and expressions are compared with GiNaC:
//      a difference that simplifies to 0 (normal()) is equal; else the two sides are evaluated
//      with 50 significant digits, at six points when symbols occur. A polynomial or rational
//      function with exact coefficients whose difference does not simplify to 0 is unequal
//      without evaluation.
//
// Policies (each is tested in tests/env/math_answer_test.cpp):
//   - Exact numbers are compared exactly: 1/2 = 0.5 = \frac{1}{2} (decimals are read as exact
//     fractions), 2\sqrt{2} = \sqrt{8}, but 10^{20}+1 != 10^{20}. When either side holds a decimal
//     literal, the values need only agree to a relative 1e-6 (absolute 1e-9): a decimal is often
//     rounded, so 0.3333333 = 1/3, but 0.333 != 1/3 and 3.14 != \pi.
//   - Percent: a trailing % may be read as a unit or as a value, so "50\%" equals both "50" and
//     "0.5" (a model asked for a percentage may or may not convert it; a probability written as a
//     percentage is still right). Both sides with % compare their numbers: 50\% != 0.5\%.
//   - Units and words after a number are dropped: "5 \text{ cm}", "5 cm", "30^\circ", "\$5" are 5.
//     A number followed by a space and a word of two or more letters is read as number + unit, so
//     "2 xy" is 2 (write "2xy" for the product).
//   - Thousands separators: "1,000,000", "1{,}000" and "1\,000" are numbers when the whole answer
//     has that shape; "(1, 2)" and "1, 2" are not.
//   - Tuples and intervals: "(1, 2)", "[1, 2)", "(-\infty, 3]" compare element by element and
//     their brackets must match. Sets "\{1, 2\}" and bare lists "1, 2" ("2, -3" for the roots of
//     an equation) ignore order. "a \pm b" is the set {a + b, a - b}. Unions of intervals ignore
//     order. A one-element set equals its element.
//   - Relations: "x = 3" equals 3 when the expected answer has no relation (the last side is the
//     answer); an expected "x = 3" accepts "3". Two relations need the same operators and sides.
//   - Multiple choice: when the expected answer is a letter A-E, "(B)", "B", "\text{(B)}" and "b"
//     are all B.
//   - Words: answers holding a word of four or more letters ("Tuesday", "\text{no solution}")
//     compare as text, ignoring case and spaces.
//   - Symbols: e is Euler's number, i the imaginary unit, \infty a symbol of its own; implicit
//     multiplication ("2x", "2\sqrt{2}", "x(x+1)") is understood, and "2\frac{1}{2}" is a mixed
//     number (5/2) while "2(\frac{1}{2})" is 1. \sqrt[3]{-8} is the real root -2. Matrices and
//     vectors (pmatrix, bmatrix) read as the tuple of their entries.
//
// Hostile input: answers longer than kMaxMathAnswerChars, nested deeper than 50 brackets, with an
// exponent beyond 10000, an exact number beyond 40000 bits, n! beyond 1000!, a binomial beyond
// n = 10000, more than 50 elements or 16 symbols, or sin/cos/tan of an argument beyond 1e20 are
// unequal, with the reason, before any expensive algebra. Factorials of expressions with symbols
// are refused too (GiNaC may turn an evaluation point back into an exact integer and compute its
// factorial exactly). Expressions whose expansion would exceed 2000 terms skip normal() and are
// compared by evaluation. GiNaC's exceptions are caught; nothing here throws on any input.
//
// Thread safety: GiNaC is not thread-safe (reference counts, global precision), so all GiNaC work
// runs under ginac_mutex(); extraction, normalisation and the fast path run outside it.
#pragma once

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace trellis::env {

inline constexpr size_t kMaxMathAnswerChars = 1000;

// The final answer of a model's reply (trimmed), or none when there is no (closed) \boxed{} and no
// answer line.
std::optional<std::string> extract_boxed_answer(std::string_view completion);

// The normalised form of an answer (the fast path compares these), or none when the answer is
// empty, longer than kMaxMathAnswerChars, or nothing is left after normalisation.
std::optional<std::string> normalize_math_answer(std::string_view answer);

struct MathOptions {
  // Also require the answer to be simplified, so that a task "compute 1/2 + 1/3" cannot be answered
  // by copying "1/2 + 1/3": every exact rational part must be written as one integer, decimal or
  // fraction in lowest terms (5/6, -3/4, 0.75; not 10/12, 1/2 + 1/3, 2^{10} or 0.35 * 240), square
  // roots of integers must have square-free radicands (5\sqrt{3}, not \sqrt{75}) and no root may
  // stay in a denominator. Symbols and irrational parts may be arranged freely: (3 + \sqrt{13})/2
  // and 3/2 + \sqrt{13}/2 both pass.
  bool require_simplified = false;
};

struct MathVerdict {
  bool equal = false;
  // How the verdict was reached ("same after normalisation", "symbolically equal", "different
  // values", ...) or what made an answer unusable ("exponent 999999999 exceeds the limit 10000").
  std::string detail;
  // Equal in value, but not simplified when MathOptions::require_simplified asked for it.
  bool unsimplified = false;
};

// Whether `given` (a model's answer) equals `expected` (the ground truth), and how that was
// decided.
MathVerdict compare_math_answers(std::string_view given, std::string_view expected,
                                 const MathOptions& options = {});

inline bool math_answers_equal(std::string_view given, std::string_view expected,
                               const MathOptions& options = {}) {
  return compare_math_answers(given, expected, options).equal;
}

}  // namespace trellis::env
