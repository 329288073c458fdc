// Helpers for the TOPLOC tests: bf16 conversion and reproducible random hidden-state rows.
#pragma once

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

namespace trellis::test {

// float -> bf16 bits, round to nearest even (finite inputs).
inline uint16_t to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

inline float from_bf16(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

// n values ~ N(0, scale^2) as bf16 bits.
inline std::vector<uint16_t> random_rows(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> out(n);
  for (auto& v : out) v = to_bf16(normal(rng));
  return out;
}

}  // namespace trellis::test
