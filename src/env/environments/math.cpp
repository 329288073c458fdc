// The math environment: problems whose final answer is a number, expression, tuple or set, given
// in \boxed{} and compared with the ground truth by verifiers/math_answer.h (LaTeX normalisation,
// then symbolic and numeric equality with GiNaC). The reward is binary.
//
// verification_info: {"ground_truth": "<LaTeX answer>"} and, optionally, "simplified": true to
// also require a simplified answer (MathOptions::require_simplified), which the generator sets
// wherever the prompt itself holds an expression equal to the answer ("compute 1/2 + 1/3": copying
// the question must not score).
//
// The generator (no dataset download: everything is synthetic, with answers computed exactly in
// integer and rational arithmetic) draws one of eleven problem families; the difficulty scales
// their numbers and steps (see each family's comment). The reference solution is a short worked
// reply ending in \boxed{answer}.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/rng.h"
#include "env/environments/environments.h"
#include "env/verifiers/math_answer.h"

namespace trellis::env {
namespace {

// ---------------------------------------------------------------------------------------------
// Exact arithmetic and LaTeX for the generator (values stay far below the int64 range).

struct Rational {
  int64_t num = 0;
  int64_t den = 1;
};

Rational rational(int64_t num, int64_t den = 1) {
  if (den < 0) num = -num, den = -den;
  const int64_t g = std::gcd(num, den);
  return g > 1 ? Rational{num / g, den / g} : Rational{num, den};
}
Rational operator+(Rational a, Rational b) {
  return rational(a.num * b.den + b.num * a.den, a.den * b.den);
}
Rational operator*(Rational a, Rational b) { return rational(a.num * b.num, a.den * b.den); }
Rational operator/(Rational a, Rational b) { return rational(a.num * b.den, a.den * b.num); }

// "5", "-\frac{3}{4}". Not reduced here: Rational{4, 36} is "\frac{4}{36}" (rational() reduces).
std::string latex(Rational r) {
  if (r.den == 1) return std::to_string(r.num);
  return fmt::format("{}\\frac{{{}}}{{{}}}", r.num < 0 ? "-" : "", std::abs(r.num), r.den);
}

// A rational whose denominator divides a power of 10 as a decimal: 25/2 -> "12.5".
std::string decimal(Rational r) {
  int places = 0;
  int64_t scale = 1;
  while (r.den != 1 && scale % r.den != 0 && places < 12) scale *= 10, ++places;
  if (r.den == 1) return std::to_string(r.num);
  const int64_t scaled = r.num * (scale / r.den);
  std::string digits = std::to_string(std::abs(scaled));
  if (digits.size() <= static_cast<size_t>(places)) {
    digits.insert(0, static_cast<size_t>(places) + 1 - digits.size(), '0');
  }
  digits.insert(digits.size() - static_cast<size_t>(places), ".");
  while (digits.back() == '0') digits.pop_back();
  if (digits.back() == '.') digits.pop_back();
  return (scaled < 0 ? "-" : "") + digits;
}

// A polynomial in `var` from its coefficients, highest power first: {2, 0, -1} -> "2x^{2} - 1".
std::string polynomial(const std::vector<int64_t>& coefficients, std::string_view var = "x") {
  std::string out;
  const size_t degree = coefficients.size() - 1;
  for (size_t i = 0; i < coefficients.size(); ++i) {
    const int64_t c = coefficients[i];
    if (c == 0) continue;
    const size_t power = degree - i;
    if (!out.empty()) out += c < 0 ? " - " : " + ";
    if (out.empty() && c < 0) out += "-";
    const int64_t magnitude = std::abs(c);
    if (magnitude != 1 || power == 0) out += std::to_string(magnitude);
    if (power >= 1) out += var;
    if (power >= 2) out += fmt::format("^{{{}}}", power);
  }
  return out.empty() ? "0" : out;
}

// "3x - 2y = 7"
std::string equation_in_x_y(int64_t a, int64_t b, int64_t c) {
  std::string left = polynomial({a, 0});
  if (b != 0) {
    left += b < 0 ? " - " : " + ";
    if (std::abs(b) != 1) left += std::to_string(std::abs(b));
    left += "y";
  }
  return fmt::format("{} = {}", left, c);
}

std::vector<int64_t> multiply(const std::vector<int64_t>& p, const std::vector<int64_t>& q) {
  std::vector<int64_t> out(p.size() + q.size() - 1, 0);
  for (size_t i = 0; i < p.size(); ++i) {
    for (size_t j = 0; j < q.size(); ++j) out[i + j] += p[i] * q[j];
  }
  return out;
}

// k\sqrt{m} for a rational coefficient k: "2\sqrt{3}", "-\sqrt{2}", "\frac{3\sqrt{5}}{2}".
std::string radical(Rational k, int64_t m) {
  if (k.num == 0) return "0";
  const int64_t magnitude = std::abs(k.num);
  const std::string top =
      (magnitude == 1 ? "" : std::to_string(magnitude)) + fmt::format("\\sqrt{{{}}}", m);
  const std::string sign = k.num < 0 ? "-" : "";
  if (k.den == 1) return sign + top;
  return fmt::format("{}\\frac{{{}}}{{{}}}", sign, top, k.den);
}

// "2^{2} \cdot 3 \cdot 7"
std::string factorization(int64_t n) {
  std::vector<std::string> parts;
  for (int64_t p = 2; p * p <= n; ++p) {
    int e = 0;
    while (n % p == 0) n /= p, ++e;
    if (e > 0) parts.push_back(e == 1 ? std::to_string(p) : fmt::format("{}^{{{}}}", p, e));
  }
  if (n > 1) parts.push_back(std::to_string(n));
  return parts.empty() ? "1" : fmt::format("{}", fmt::join(parts, " \\cdot "));
}

// "a = b = c" without repeats: {"4/36", "1/9"} -> "4/36 = 1/9", {"1/9", "1/9"} -> "1/9".
std::string chain(const std::vector<std::string>& steps) {
  std::string out;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i > 0 && steps[i] == steps[i - 1]) continue;
    if (!out.empty()) out += " = ";
    out += steps[i];
  }
  return out;
}

int64_t nonzero(RandomStream& rng, int64_t lo, int64_t hi) {
  while (true) {
    const int64_t v = rng.uniform_int(lo, hi);
    if (v != 0) return v;
  }
}

int64_t binomial(int64_t n, int64_t k) {
  int64_t out = 1;
  for (int64_t i = 1; i <= k; ++i) out = out * (n - k + i) / i;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Problem families

struct Problem {
  std::string family;
  std::string prompt;
  std::string answer;  // LaTeX ground truth
  std::string work;    // the worked solution, before the boxed answer
  bool simplified = true;
};

// 2 terms (d 1-3), 3 (4-6), 4 (7-9), 5 (10) fractions with denominators up to 4 + d, joined by
// + and -; from d 4 some terms are products, from d 7 quotients.
Problem fractions(RandomStream& rng, int d) {
  const int terms = 2 + (d - 1) / 3;
  auto draw = [&](std::string& text) {
    const int64_t den = rng.uniform_int(2, 4 + d);
    const int64_t num = rng.uniform_int(1, 3 + d);
    text = fmt::format("\\frac{{{}}}{{{}}}", num, den);
    return rational(num, den);
  };
  std::string expression, steps;
  std::vector<Rational> values;
  for (int i = 0; i < terms; ++i) {
    std::string a_text, b_text, term;
    Rational value = draw(a_text);
    term = a_text;
    const bool quotient = d >= 7 && rng.bernoulli(0.25);
    const bool product = !quotient && d >= 4 && rng.bernoulli(0.35);
    if (quotient || product) {
      const Rational b = draw(b_text);
      term = fmt::format("{} {} {}", a_text, quotient ? "\\div" : "\\cdot", b_text);
      value = quotient ? value / b : value * b;
      steps += fmt::format("${} = {}$. ", term, latex(value));
    }
    const bool minus = i > 0 && rng.bernoulli(0.5);
    if (i > 0) expression += minus ? " - " : " + ";
    expression += term;
    values.push_back(minus ? Rational{-value.num, value.den} : value);
  }
  int64_t common = 1;
  Rational total{0, 1};
  for (const Rational& v : values) {
    common = std::lcm(common, v.den);
    total = total + v;
  }
  std::string over_common;
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t top = values[i].num * (common / values[i].den);
    if (i > 0) over_common += top < 0 ? " - " : " + ";
    over_common += latex({i == 0 ? top : std::abs(top), common});
  }
  Problem p;
  p.family = "fractions";
  p.prompt = fmt::format(
      "Compute ${}$. Give the answer as a fraction in lowest terms, or an integer.", expression);
  p.answer = latex(total);
  p.work = fmt::format(
      "{}{}Over the common denominator ${}$: ${}$.",
      steps.empty() ? "" : "Products and quotients first: ", steps, common,
      chain({over_common, latex({total.num * (common / total.den), common}), p.answer}));
  return p;
}

// a x + b = c x + e. Slopes and constants grow with d; x appears on one side up to d 2, on both
// from d 3; the solution is an integer up to d 5 and a fraction with denominator up to 6 from d 6.
Problem linear_equation(RandomStream& rng, int d) {
  const int64_t range = 2 + d;
  int64_t q = 1, p = 0;
  if (d >= 6) {
    q = rng.uniform_int(2, std::min<int64_t>(6, d - 3));
    do p = nonzero(rng, -3 * d, 3 * d);
    while (std::gcd(p, q) != 1);
  } else {
    p = rng.uniform_int(-3 * d, 3 * d);
  }
  const Rational x = rational(p, q);
  int64_t a = 0, c = 0, slope = 0;
  while (a == 0) {
    c = d <= 2 ? 0 : rng.uniform_int(-range, range);
    slope = q > 1 ? q * nonzero(rng, -2, 2) : nonzero(rng, -range, range);
    a = c + slope;
  }
  const int64_t b = rng.uniform_int(-5 * d, 5 * d);
  const int64_t e = slope * p / q + b;
  const std::string right = c == 0 ? std::to_string(e) : polynomial({c, e});
  Problem problem;
  problem.family = "linear_equation";
  problem.prompt = fmt::format("Solve for $x$: ${} = {}$.", polynomial({a, b}), right);
  problem.answer = latex(x);
  problem.work = fmt::format(
      "Collecting the $x$ terms on the left and the constants on the right gives ${} = {}$, so "
      "$x = {}$.",
      polynomial({slope, 0}), e - b, problem.answer);
  return problem;
}

// Two equations in x and y with coefficients up to 2 + d and an integer solution up to 2 + 2d.
Problem linear_system(RandomStream& rng, int d) {
  const int64_t range = 2 + d;
  const int64_t x = rng.uniform_int(-(2 + 2 * d), 2 + 2 * d);
  const int64_t y = rng.uniform_int(-(2 + 2 * d), 2 + 2 * d);
  int64_t a1 = 0, b1 = 0, a2 = 0, b2 = 0, det = 0;
  while (det == 0) {
    a1 = nonzero(rng, -range, range), b1 = nonzero(rng, -range, range);
    a2 = nonzero(rng, -range, range), b2 = nonzero(rng, -range, range);
    det = a1 * b2 - a2 * b1;
  }
  const int64_t c1 = a1 * x + b1 * y, c2 = a2 * x + b2 * y;
  Problem p;
  p.family = "linear_system";
  p.prompt = fmt::format(
      "Solve the system of equations ${}$ and ${}$. Give the answer as an ordered pair "
      "$(x, y)$.",
      equation_in_x_y(a1, b1, c1), equation_in_x_y(a2, b2, c2));
  p.answer = fmt::format("({}, {})", x, y);
  p.work = fmt::format(
      "By Cramer's rule, with $D = ({})({}) - ({})({}) = {}$: $x = \\frac{{{}}}{{{}}} = {}$ and "
      "$y = \\frac{{{}}}{{{}}} = {}$.",
      a1, b2, a2, b1, det, c1 * b2 - c2 * b1, det, x, a1 * c2 - a2 * c1, det, y);
  return p;
}

// Integer roots up to 3 + 2d (d 1-3), rational roots with denominators up to d - 2 (d 4-6),
// irrational roots in simplified radical form (d 7-10).
Problem quadratic(RandomStream& rng, int d) {
  Problem p;
  p.family = "quadratic";
  std::vector<int64_t> poly;
  if (d <= 6) {
    const int64_t q1 = d <= 3 ? 1 : rng.uniform_int(1, d - 2);
    const int64_t q2 = d <= 3 ? 1 : rng.uniform_int(1, d - 2);
    const int64_t bound = d <= 3 ? 3 + 2 * d : 2 * d;
    const int64_t p1 = rng.uniform_int(-bound, bound), p2 = rng.uniform_int(-bound, bound);
    poly = multiply({q1, -p1}, {q2, -p2});
    const int64_t g = std::gcd(std::gcd(poly[0], poly[1]), poly[2]);
    for (auto& c : poly) c /= g;
    Rational r1 = rational(p1, q1), r2 = rational(p2, q2);
    if (r1.num * r2.den > r2.num * r1.den) std::swap(r1, r2);
    const int64_t disc = poly[1] * poly[1] - 4 * poly[0] * poly[2];
    const bool double_root = r1.num == r2.num && r1.den == r2.den;
    p.answer = double_root ? latex(r1) : latex(r1) + ", " + latex(r2);
    p.work = double_root
                 ? fmt::format("The discriminant is $0$, so there is one root: $x = {}$.", p.answer)
                 : fmt::format(
                       "The discriminant is ${}$, a perfect square, so the roots "
                       "$x = \\frac{{{} \\pm \\sqrt{{{}}}}}{{{}}}$ are rational: $x = {}$ and "
                       "$x = {}$.",
                       disc, -poly[1], disc, 2 * poly[0], latex(r1), latex(r2));
  } else {
    int64_t a = 1, b = 2, c = -1, disc = 8;  // the fallback: x^2 + 2x - 1
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int64_t ta = rng.uniform_int(1, d - 6), tb = rng.uniform_int(-2 * d, 2 * d);
      const int64_t tc = nonzero(rng, -3 * d, 3 * d);
      const int64_t td = tb * tb - 4 * ta * tc;
      const auto root =
          static_cast<int64_t>(std::sqrt(static_cast<double>(std::max<int64_t>(td, 0))));
      bool square = false;
      for (int64_t s = std::max<int64_t>(0, root - 1); s <= root + 1; ++s) square |= s * s == td;
      if (td > 0 && !square && std::gcd(std::gcd(ta, tb), tc) == 1) {
        a = ta, b = tb, c = tc, disc = td;
        break;
      }
    }
    poly = {a, b, c};
    int64_t s = 1, m = disc;  // disc = s^2 m with m square-free
    for (int64_t f = 2; f * f <= m; ++f) {
      while (m % (f * f) == 0) m /= f * f, s *= f;
    }
    const int64_t g = std::gcd(std::gcd(std::abs(b), s), 2 * a);
    const int64_t top = -b / g, coefficient = s / g, bottom = 2 * a / g;
    const std::string root_part =
        (coefficient == 1 ? "" : std::to_string(coefficient)) + fmt::format("\\sqrt{{{}}}", m);
    const std::string numerator =
        top == 0 ? "\\pm " + root_part : fmt::format("{} \\pm {}", top, root_part);
    p.answer = bottom == 1 ? numerator : fmt::format("\\frac{{{}}}{{{}}}", numerator, bottom);
    const std::string formula = fmt::format("\\frac{{{} \\pm {}\\sqrt{{{}}}}}{{{}}}", -b,
                                            s == 1 ? "" : std::to_string(s), m, 2 * a);
    p.work =
        fmt::format("The discriminant is ${}^2 - 4 \\cdot {} \\cdot {} = {}$, {}, so $x = {}$.",
                    b < 0 ? fmt::format("({})", b) : std::to_string(b), a,
                    c < 0 ? fmt::format("({})", c) : std::to_string(c), disc,
                    s == 1 ? "which is square-free"
                           : fmt::format("which is ${}$ times the square-free ${}$", s * s, m),
                    chain({formula, p.answer}));
  }
  p.prompt = fmt::format(
      "Find all real solutions of ${} = 0$. If there is more than one, separate them with "
      "commas.",
      polynomial(poly));
  return p;
}

// p% of n (d 1-3), a percent change between two prices (d 4-6), two successive changes (d 7-10).
Problem percent(RandomStream& rng, int d) {
  Problem p;
  p.family = "percent";
  if (d <= 3) {
    const int64_t pct = d == 1 ? 10 * rng.uniform_int(1, 9) : 5 * rng.uniform_int(1, 19);
    const int64_t n = 10 * rng.uniform_int(1, 20 * d);
    p.prompt = fmt::format("What is ${}\\%$ of ${}$?", pct, n);
    p.answer = decimal(rational(pct * n, 100));
    p.work = fmt::format("${}\\%$ of ${}$ is $\\frac{{{}}}{{100}} \\cdot {} = {}$.", pct, n, pct, n,
                         p.answer);
  } else if (d <= 6) {
    const int64_t before = 20 * rng.uniform_int(1, 5 * d);
    const bool decrease = d >= 5 && rng.bernoulli(0.5);
    const int64_t pct = 5 * rng.uniform_int(1, decrease ? 19 : 10 * (d - 2));
    const int64_t change = before / 20 * pct / 5;
    const int64_t after = decrease ? before - change : before + change;
    p.prompt = fmt::format(
        "A price changes from ${}$ dollars to ${}$ dollars. By what percent did "
        "it {}?",
        before, after, decrease ? "decrease" : "increase");
    p.answer = fmt::format("{}\\%", pct);
    p.work = fmt::format(
        "The price {} by ${}$ dollars, and $\\frac{{{}}}{{{}}} = \\frac{{{}}}{{100}}$, so the "
        "change is ${}$.",
        decrease ? "fell" : "rose", change, change, before, pct, p.answer);
  } else {
    const auto draw = [&] { return d <= 8 ? 5 * rng.uniform_int(1, 10) : rng.uniform_int(1, 60); };
    const int64_t up = draw(), down = draw();
    const Rational result = rational((100 + up) * (100 - down), 100);
    p.prompt = fmt::format(
        "A quantity is increased by ${}\\%$, and the result is then decreased by ${}\\%$. The "
        "final value is what percent of the original value?",
        up, down);
    p.answer = decimal(result) + "\\%";
    p.work = fmt::format(
        "The two changes multiply: $\\frac{{{}}}{{100}} \\cdot \\frac{{{}}}{{100}} = "
        "\\frac{{{}}}{{100}}$ of the original, that is ${}$.",
        100 + up, 100 - down, decimal(result), p.answer);
  }
  return p;
}

// \sqrt{N} (d 1-3), a sum or difference of two like radicals (d 4-6), three of them or a
// denominator to rationalise (d 7-10); multipliers up to 2 + d.
Problem radicals(RandomStream& rng, int d) {
  static const int64_t kSquareFree[] = {2, 3, 5, 6, 7, 10, 11, 13, 14, 15, 17, 19, 21, 22, 23};
  const int64_t m = kSquareFree[rng.uniform_int(0, d <= 3 ? 6 : 14)];
  const auto multiplier = [&] { return rng.uniform_int(2, 2 + d); };
  Problem p;
  p.family = "radicals";
  if (d >= 7 && rng.bernoulli(0.5)) {
    const int64_t k = multiplier(), c = rng.uniform_int(1, 10 * d);
    const Rational coefficient = rational(c, k * m);  // c / (k sqrt m) = c sqrt m / (k m)
    p.prompt = fmt::format(
        "Simplify $\\frac{{{}}}{{\\sqrt{{{}}}}}$ and rationalize the denominator.", c, k * k * m);
    p.answer = radical(coefficient, m);
    p.work = fmt::format(
        "$\\sqrt{{{}}} = {}\\sqrt{{{}}}$, and multiplying by "
        "$\\frac{{\\sqrt{{{}}}}}{{\\sqrt{{{}}}}}$ "
        "gives ${}$.",
        k * k * m, k, m, m, m,
        chain({fmt::format("\\frac{{{}\\sqrt{{{}}}}}{{{}}}", c, m, k * m), p.answer}));
    return p;
  }
  const int count = d <= 3 ? 1 : d <= 6 ? 2 : 3;
  std::string expression, parts;
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    int64_t k = multiplier();
    const bool minus = i > 0 && d >= 5 && rng.bernoulli(0.5);
    if (minus && total == k) k = k == 2 + d ? k - 1 : k + 1;  // keep the result nonzero
    if (i > 0) expression += minus ? " - " : " + ";
    expression += fmt::format("\\sqrt{{{}}}", k * k * m);
    if (i > 0) parts += minus ? " - " : " + ";
    parts += fmt::format("{}\\sqrt{{{}}}", k, m);
    total += minus ? -k : k;
  }
  if (total == 0) {  // three terms can still cancel: add one more
    const int64_t k = multiplier();
    expression += fmt::format(" + \\sqrt{{{}}}", k * k * m);
    parts += fmt::format(" + {}\\sqrt{{{}}}", k, m);
    total += k;
  }
  p.prompt = fmt::format("Simplify ${}$.", expression);
  p.answer = radical(rational(total), m);
  p.work =
      fmt::format("Taking the square factors out: ${}$.", chain({expression, parts, p.answer}));
  return p;
}

// Arithmetic sums of 5 to 5 + 3d terms (d 1-3), geometric sums with ratio +-2 or +-3 (d 4-6),
// geometric sums with ratio +-1/2 or +-1/3 as fractions (d 7-10).
Problem series(RandomStream& rng, int d) {
  Problem p;
  p.family = "series";
  if (d <= 3) {
    const int64_t first = rng.uniform_int(1, 5 + d);
    const int64_t step = d == 3 ? nonzero(rng, -5, 5) : rng.uniform_int(1, 2 + d);
    const int64_t n = rng.uniform_int(5, 5 + 3 * d);
    const int64_t last = first + (n - 1) * step;
    p.prompt = fmt::format(
        "What is the sum of the first ${}$ terms of the arithmetic sequence ${}, {}, {}, "
        "\\ldots$?",
        n, first, first + step, first + 2 * step);
    p.answer = std::to_string(n * (first + last) / 2);
    p.work = fmt::format(
        "The ${}$th term is ${} + {} \\cdot ({}) = {}$, so the sum is "
        "$\\frac{{{} \\cdot ({} + {})}}{{2}} = {}$.",
        n, first, n - 1, step, last, n, first, last, p.answer);
    return p;
  }
  Rational ratio, first;
  int64_t n = 0;
  if (d <= 6) {
    ratio = rational(rng.uniform_int(2, 3) * (d == 6 && rng.bernoulli(0.5) ? -1 : 1));
    first = rational(rng.uniform_int(1, 5));
    n = rng.uniform_int(4, d + 2);
  } else {
    const int64_t t = rng.uniform_int(2, 3);
    ratio = rational(d >= 9 && rng.bernoulli(0.5) ? -1 : 1, t);
    first = rational(t * t * rng.uniform_int(1, 4));
    n = rng.uniform_int(5, d);
  }
  Rational term = first, sum{0, 1};
  std::vector<std::string> shown;
  for (int64_t i = 0; i < n; ++i) {
    if (i < 3) shown.push_back(latex(term));
    sum = sum + term;
    term = term * ratio;
  }
  p.prompt = fmt::format(
      "What is the sum of the first ${}$ terms of the geometric sequence ${}, \\ldots$? Give the "
      "answer as an integer or a fraction in lowest terms.",
      n, fmt::join(shown, ", "));
  p.answer = latex(sum);
  p.work = fmt::format(
      "The first term is ${}$ and the ratio ${}$, so the sum is ${} \\cdot \\frac{{1 - "
      "({})^{{{}}}}}"
      "{{1 - ({})}} = {}$.",
      latex(first), latex(ratio), latex(first), latex(ratio), n, latex(ratio), p.answer);
  return p;
}

// gcd of two numbers with a common factor (d 1-3), lcm of two (d 4-6), gcd or lcm of three
// (d 7-10); the numbers grow with d.
Problem gcd_lcm(RandomStream& rng, int d) {
  std::vector<int64_t> numbers;
  bool want_gcd = true;
  if (d <= 3) {
    const int64_t g = rng.uniform_int(2, 4 + 2 * d);
    while (numbers.size() < 2) {
      const int64_t v = g * rng.uniform_int(1, 6 + 2 * d);
      if (numbers.empty() || v != numbers[0]) numbers.push_back(v);
    }
  } else if (d <= 6) {
    want_gcd = false;
    while (numbers.size() < 2) {
      const int64_t v = rng.uniform_int(4, 10 * d);
      if (numbers.empty() || v != numbers[0]) numbers.push_back(v);
    }
  } else {
    want_gcd = rng.bernoulli(0.5);
    const int64_t g = want_gcd ? rng.uniform_int(2, 12) : 1;
    while (numbers.size() < 3) {
      const int64_t v = g * rng.uniform_int(want_gcd ? 2 : 4, want_gcd ? 5 + d : 6 * d);
      if (std::find(numbers.begin(), numbers.end(), v) == numbers.end()) numbers.push_back(v);
    }
  }
  int64_t result = want_gcd ? 0 : 1;
  std::vector<std::string> factored;
  for (int64_t v : numbers) {
    result = want_gcd ? std::gcd(result, v) : std::lcm(result, v);
    factored.push_back(chain({std::to_string(v), factorization(v)}));
  }
  const std::string listed =
      numbers.size() == 2 ? fmt::format("${}$ and ${}$", numbers[0], numbers[1])
                          : fmt::format("${}$, ${}$ and ${}$", numbers[0], numbers[1], numbers[2]);
  Problem p;
  p.family = "gcd_lcm";
  p.prompt = fmt::format("What is the {} of {}?",
                         want_gcd ? "greatest common divisor" : "least common multiple", listed);
  p.answer = std::to_string(result);
  p.work = fmt::format("Factor: ${}$. The {} takes each prime to its {} power: ${}$.",
                       fmt::join(factored, "$, $"), want_gcd ? "gcd" : "lcm",
                       want_gcd ? "lowest" : "highest",
                       chain({factorization(result), std::to_string(result)}));
  return p;
}

// The sum of two dice (d 1-3), k heads in d tosses of a coin (d 4-6), the sum of three dice
// (d 7-8: equal to s; d 9-10: at least s); answers as fractions in lowest terms.
Problem probability(RandomStream& rng, int d) {
  Problem p;
  p.family = "probability";
  if (d >= 4 && d <= 6) {
    const int64_t n = d, k = rng.uniform_int(0, n);
    const int64_t outcomes = int64_t{1} << n, favourable = binomial(n, k);
    p.prompt = fmt::format(
        "A fair coin is tossed ${}$ times. What is the probability of getting exactly ${}$ "
        "{}? Give the answer as a fraction in lowest terms.",
        n, k, k == 1 ? "head" : "heads");
    p.answer = latex(rational(favourable, outcomes));
    p.work = fmt::format(
        "Of the $2^{{{}}} = {}$ equally likely sequences, $\\binom{{{}}}{{{}}} = {}$ have exactly "
        "${}$ {}, so the probability is ${}$.",
        n, outcomes, n, k, favourable, k, k == 1 ? "head" : "heads",
        chain({latex({favourable, outcomes}), p.answer}));
    return p;
  }
  const int dice = d <= 3 ? 2 : 3;
  const bool at_least = d >= 9;
  const int64_t target = d == 1      ? rng.uniform_int(5, 9)
                         : dice == 2 ? rng.uniform_int(2, 12)
                                     : rng.uniform_int(4, 17);
  int64_t outcomes = 0, favourable = 0;
  for (int a = 1; a <= 6; ++a) {
    for (int b = 1; b <= 6; ++b) {
      for (int c = 1; c <= (dice == 3 ? 6 : 1); ++c) {
        const int sum = a + b + (dice == 3 ? c : 0);
        ++outcomes;
        if (at_least ? sum >= target : sum == target) ++favourable;
      }
    }
  }
  p.prompt = fmt::format(
      "{} fair six-sided dice are rolled. What is the probability that the sum is {}${}$? Give "
      "the answer as a fraction in lowest terms.",
      dice == 2 ? "Two" : "Three", at_least ? "at least " : "", target);
  p.answer = latex(rational(favourable, outcomes));
  p.work = fmt::format(
      "Of the ${}$ equally likely outcomes, ${}$ have a sum {}${}$, so the probability is "
      "${}$.",
      outcomes, favourable, at_least ? "of at least " : "of ", target,
      chain({latex({favourable, outcomes}), p.answer}));
  return p;
}

// The expanded polynomial with given distinct integer roots: degree 2 monic (d 1-3), degree 3
// monic (d 4-6), degree 3 (d 7-8) or 4 (d 9-10) with a leading coefficient up to d - 5. Any
// equal form of the polynomial is right (the factored one too), so it is not `simplified`.
Problem polynomial_from_roots(RandomStream& rng, int d) {
  const int degree = d <= 3 ? 2 : d <= 8 ? 3 : 4;
  const int64_t leading = d <= 6 ? 1 : rng.uniform_int(2, d - 5);
  const int64_t bound = d <= 3 ? 2 + d : d;
  std::vector<int64_t> roots;
  while (static_cast<int>(roots.size()) < degree) {
    const int64_t r = rng.uniform_int(-bound, bound);
    if (std::find(roots.begin(), roots.end(), r) == roots.end()) roots.push_back(r);
  }
  std::sort(roots.begin(), roots.end());
  std::vector<int64_t> poly = {leading};
  std::string factors = leading == 1 ? "" : std::to_string(leading);
  for (int64_t r : roots) {
    poly = multiply(poly, {1, -r});
    factors += fmt::format("({})", polynomial({1, -r}));
  }
  std::vector<std::string> listed;
  for (int64_t r : roots) listed.push_back(fmt::format("${}$", r));
  const std::string last = listed.back();
  listed.pop_back();
  Problem p;
  p.family = "polynomial";
  p.prompt = fmt::format(
      "Find the polynomial $p(x)$ of degree ${}$ with leading coefficient ${}$ whose roots are {} "
      "and {}. Write $p(x)$ in expanded form.",
      degree, leading, fmt::join(listed, ", "), last);
  p.answer = polynomial(poly);
  p.work = fmt::format("$p(x) = {} = {}$.", factors, p.answer);
  p.simplified = false;
  return p;
}

// The coefficient of x^k in a product of binomials: two factors (d 1-3), three (d 4-6), a power
// (ax + b)^n with n up to 2 + d/2 times another factor (d 7-10).
Problem coefficient(RandomStream& rng, int d) {
  const int64_t range = 2 + d / 2;
  const auto factor = [&] {
    return std::vector<int64_t>{nonzero(rng, -range, range), nonzero(rng, -range, range)};
  };
  std::vector<std::vector<int64_t>> factors;
  std::string expression;
  if (d <= 6) {
    for (int i = 0; i < (d <= 3 ? 2 : 3); ++i) {
      factors.push_back(factor());
      expression += fmt::format("({})", polynomial(factors.back()));
    }
  } else {
    const auto base = factor();
    const int64_t n = rng.uniform_int(3, 2 + d / 2);
    for (int64_t i = 0; i < n; ++i) factors.push_back(base);
    factors.push_back(factor());
    expression = fmt::format("({})^{{{}}}({})", polynomial(base), n, polynomial(factors.back()));
  }
  std::vector<int64_t> product = {1};
  for (const auto& f : factors) product = multiply(product, f);
  const int64_t degree = static_cast<int64_t>(product.size()) - 1;
  const int64_t k = d <= 3 ? 1 : rng.uniform_int(d >= 7 ? 1 : 0, d >= 7 ? degree - 1 : degree);
  const int64_t c = product[static_cast<size_t>(degree - k)];
  const std::string term = k == 0   ? "constant term"
                           : k == 1 ? "coefficient of $x$"
                                    : fmt::format("coefficient of $x^{{{}}}$", k);
  Problem p;
  p.family = "coefficient";
  p.prompt = fmt::format("What is the {} in the expansion of ${}$?", term, expression);
  p.answer = std::to_string(c);
  p.work = fmt::format("Expanding, ${} = {}$, so the {} is ${}$.", expression, polynomial(product),
                       term, c);
  return p;
}

using Family = Problem (*)(RandomStream&, int);
constexpr Family kFamilies[] = {
    fractions, linear_equation, linear_system,         quadratic,  percent, radicals, series,
    gcd_lcm,   probability,     polynomial_from_roots, coefficient};

// One line of a reason: long answers are cut, line breaks and control bytes become spaces.
std::string shortened(std::string_view text) {
  std::string out(text.substr(0, 60));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return text.size() > 60 ? out + "..." : out;
}

class MathEnvironment final : public Environment {
 public:
  std::string name() const override { return "math"; }

  std::string description() const override {
    return "math answered in \\boxed{} and checked with GiNaC: 11 synthetic families (fractions, "
           "equations, quadratics, radicals, series, probability...); difficulty 1..10 scales "
           "numbers and steps (2..5 fraction terms; integer, rational, then irrational roots)";
  }

  std::string system_prompt() const override {
    return "Solve the problem. Reason step by step, then give the final answer in \\boxed{}, "
           "e.g. \\boxed{\\frac{3}{4}}. Simplify it fully: fractions in lowest terms, radicals "
           "simplified, no radicals in denominators.";
  }

  Task generate(uint64_t seed, int difficulty) const override {
    check_difficulty(difficulty, "math.generate");
    // The difficulty picks the stream, so one seed gives unrelated tasks at each difficulty.
    RandomStream rng(seed, static_cast<uint32_t>(difficulty));
    const auto family =
        kFamilies[rng.uniform_int(0, static_cast<int64_t>(std::size(kFamilies)) - 1)];
    const Problem problem = family(rng, difficulty);
    Task task = generated_task(*this, seed, difficulty);
    task.prompt = problem.prompt;
    task.verification_info = {{"ground_truth", problem.answer}};
    if (problem.simplified) task.verification_info["simplified"] = true;
    task.solution = problem.work + "\n\n\\boxed{" + problem.answer + "}";
    task.metadata["family"] = problem.family;
    return task;
  }

  void validate(const Task& task, const std::string& where) const override {
    const Json& info = task.verification_info;
    if (!info.is_object()) fail(where, "verification_info must be an object");
    if (!info.contains("ground_truth") || !info["ground_truth"].is_string()) {
      fail(where, "verification_info.ground_truth must be a string (the LaTeX answer)");
    }
    const std::string truth = info["ground_truth"].get<std::string>();
    if (truth.size() > kMaxMathAnswerChars) {
      fail(where, "verification_info.ground_truth is longer than {} characters",
           kMaxMathAnswerChars);
    }
    if (!normalize_math_answer(truth)) {
      fail(where, "verification_info.ground_truth is empty (after removing LaTeX spacing)");
    }
    if (info.contains("simplified") && !info["simplified"].is_boolean()) {
      fail(where, "verification_info.simplified must be true or false");
    }
  }

  Score score(const Task& task, std::string_view completion) const override {
    const auto answer = extract_boxed_answer(completion);
    if (!answer) return {0, "no \\boxed{} or Answer: line found"};
    if (answer->empty()) return {0, "the \\boxed{} is empty"};
    const Json& info = task.verification_info;
    if (!info.is_object() || !info.contains("ground_truth") || !info["ground_truth"].is_string()) {
      return {0, "the task has no ground_truth"};  // validate() rejects such tasks
    }
    const std::string truth = info["ground_truth"].get<std::string>();
    MathOptions options;
    options.require_simplified = info.contains("simplified") && info["simplified"].is_boolean() &&
                                 info["simplified"].get<bool>();
    const MathVerdict verdict = compare_math_answers(*answer, truth, options);
    if (verdict.equal) {
      return {
          1, fmt::format("answer {} equals the expected {}", shortened(*answer), shortened(truth))};
    }
    if (verdict.unsimplified) {
      return {0, fmt::format("answer {} equals the expected {} but is not simplified ({})",
                             shortened(*answer), shortened(truth), verdict.detail)};
    }
    return {0, fmt::format("answer {} differs from the expected {} ({})", shortened(*answer),
                           shortened(truth), verdict.detail)};
  }
};

}  // namespace

std::unique_ptr<Environment> make_math_environment() { return std::make_unique<MathEnvironment>(); }

}  // namespace trellis::env
