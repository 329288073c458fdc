// Polynomials over the prime field F_p, p = 65497: the arithmetic of a TOPLOC proof.
//
// A chunk proof is the unique polynomial of degree < k through k points (x_i, y_i) of F_p, stored
// as its k monomial coefficients. p = 65497 (0xFFD9) is the largest prime below 2^16, so every
// coefficient fits a u16 and a bf16 bit pattern is reduced at most once. All intermediates are
// 64-bit: the product of two residues is below 2^32. See specs/toploc.md §2.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace trellis::toploc {

inline constexpr uint32_t kPrime = 65497;

// a^-1 mod p, from a table of every inverse built on first use. Error unless a mod p != 0.
uint32_t mod_inverse(uint64_t a);

// Coefficients c_0..c_{k-1} (ascending degree, each in [0, p)) of the polynomial P of degree < k
// with P(x_i) = y_i mod p for all i, by Newton divided differences expanded to monomial form;
// O(k^2). Error if the x are not pairwise distinct mod p, if the lengths differ, or if k = 0.
std::vector<uint16_t> interpolate(std::span<const uint32_t> x, std::span<const uint32_t> y);

// P(x) mod p by Horner's rule; coefficients need not be reduced. 0 for an empty polynomial.
uint32_t evaluate(std::span<const uint16_t> coeffs, uint64_t x);

}  // namespace trellis::toploc
