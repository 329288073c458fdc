// Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011; the Random123 library). The output is a pure function of
// (counter, key), so a draw can be recomputed anywhere from its coordinates alone: verifiable
// sampling keys it by (sample seed, position), whatever else runs in the batch or on the machine.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

namespace trellis {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Philox4x32 with 10 rounds: four 32-bit outputs, bit-identical to Random123's philox4x32_R(10).
std::array<uint32_t, 4> philox4x32(PhiloxCounter counter, PhiloxKey key);

// A double in [0, 1) from 53 random bits: the 32 bits of `hi` followed by the top 21 bits of `lo`,
// times 2^-53. Every multiple of 2^-53 in [0, 1) is equally likely; the largest is 1 - 2^-53.
double uniform53(uint32_t hi, uint32_t lo);

// A deterministic stream of random numbers keyed by a 64-bit seed: Philox4x32-10 over an
// incrementing counter. For generators that must give the same output for the same seed on every
// machine (synthetic tasks); the standard library's distributions are not portable, these are.
class RandomStream {
 public:
  explicit RandomStream(uint64_t seed, uint32_t stream = 0);
  uint32_t next_u32();
  uint64_t next_u64();
  double uniform();                             // [0, 1)
  int64_t uniform_int(int64_t lo, int64_t hi);  // [lo, hi], unbiased (rejection sampling)
  bool bernoulli(double p);
  template <typename It>
  void shuffle(It first, It last) {  // Fisher-Yates
    for (auto n = last - first; n > 1; --n) std::swap(first[n - 1], first[uniform_int(0, n - 1)]);
  }

 private:
  PhiloxKey key_;
  PhiloxCounter counter_;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;
};

}  // namespace trellis
