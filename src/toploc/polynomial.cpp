#include "toploc/polynomial.h"

#include <vector>

#include "common/error.h"

namespace trellis::toploc {
namespace {

constexpr uint64_t kP = kPrime;

uint64_t sub_mod(uint64_t a, uint64_t b) { return a >= b ? a - b : a + kP - b; }

// Every inverse mod p, from inv[i] = -(p / i) * inv[p mod i]: 256 KiB, built once. Interpolating
// 128 points takes 8128 inverses; extended Euclid for each was most of a proof's cost.
const std::vector<uint32_t>& inverses() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> inv(kP, 0);
    inv[1] = 1;
    for (uint64_t i = 2; i < kP; ++i)
      inv[i] = static_cast<uint32_t>((kP - kP / i) * inv[kP % i] % kP);
    return inv;
  }();
  return table;
}

}  // namespace

uint32_t mod_inverse(uint64_t a) {
  if (a % kP == 0) fail("toploc", "{} has no inverse mod {}", a, kPrime);
  return inverses()[a % kP];
}

std::vector<uint16_t> interpolate(std::span<const uint32_t> x, std::span<const uint32_t> y) {
  if (x.size() != y.size()) {
    fail("toploc interpolation", "{} x values but {} y values", x.size(), y.size());
  }
  const size_t k = x.size();
  if (k == 0) fail("toploc interpolation", "no points to interpolate");
  std::vector<uint64_t> xs(k), dd(k);
  for (size_t i = 0; i < k; ++i) {
    xs[i] = x[i] % kP;
    dd[i] = y[i] % kP;
  }
  const std::vector<uint32_t>& inv = inverses();
  // Divided differences in place: after round j, dd[i] = f[x_{i-j}, ..., x_i] for i >= j, so at
  // the end dd[i] = f[x_0, ..., x_i], the i-th Newton coefficient.
  for (size_t j = 1; j < k; ++j) {
    for (size_t i = k - 1; i >= j; --i) {
      const uint64_t den = sub_mod(xs[i], xs[i - j]);
      if (den == 0) {
        fail("toploc interpolation", "x[{}] and x[{}] are equal mod {}", i - j, i, kPrime);
      }
      dd[i] = sub_mod(dd[i], dd[i - 1]) * inv[den] % kP;
    }
  }
  // Newton form P = dd0 + (x - x0)(dd1 + (x - x1)(dd2 + ...)), expanded from the innermost
  // bracket outwards: poly <- poly * (x - x_i) + dd_i.
  std::vector<uint64_t> poly(k, 0);
  poly[0] = dd[k - 1];
  for (size_t i = k - 1; i-- > 0;) {
    // Degree of poly is k-2-i before the multiplication; shift up and subtract x_i * poly.
    const size_t deg = k - 2 - i;
    poly[deg + 1] = poly[deg];
    for (size_t d = deg; d > 0; --d) poly[d] = sub_mod(poly[d - 1], xs[i] * poly[d] % kP);
    poly[0] = sub_mod(dd[i], xs[i] * poly[0] % kP);
  }
  std::vector<uint16_t> out(k);
  for (size_t i = 0; i < k; ++i) out[i] = static_cast<uint16_t>(poly[i]);
  return out;
}

uint32_t evaluate(std::span<const uint16_t> coeffs, uint64_t x) {
  const uint64_t xr = x % kP;
  uint64_t acc = 0;
  for (size_t i = coeffs.size(); i-- > 0;) acc = (acc * xr + coeffs[i]) % kP;
  return static_cast<uint32_t>(acc);
}

}  // namespace trellis::toploc
